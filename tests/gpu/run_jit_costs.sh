#!/usr/bin/env bash
# Two processes on one fresh cache folder: the first compiles, the second must load from disk.
set -u
exe=$1
export CONV3DJIT_CACHE_DIR=$2
rm -rf "$CONV3DJIT_CACHE_DIR"
"$exe" cold; rc=$?
[ $rc -eq 0 ] || exit $rc
"$exe" warm
