#!/usr/bin/env bash
set -u
out=${OUT:-device-out}; mkdir -p "$out"
OUT=$out/logs bash tools/device_session.sh tests 2>&1 | grep -E "tests passed|Failed|\*\*\*|PASS|FAIL|median" | head -20
cp $out/logs/ctest.log $out/ctest.log
