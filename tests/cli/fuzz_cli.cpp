// fuzz_cli CLI WORKDIR SEED CASES [CASE]: feeds the conv3djit tool manifests and argument lists
// mutated from valid ones (random bytes, truncation, huge numbers, deep nesting, repeated keys,
// wrong types, unicode) and fails if any run ends by a signal, outlives its time limit, or exits
// with a code outside the documented set (0, 1, 2, 100-127). Case i is drawn from SEED and i
// alone, so `fuzz_cli CLI DIR SEED CASES i` replays one failure (the cache commands among the
// cases see the files that earlier cases left in WORKDIR).
//
// Nothing here may make the tool compile or touch a GPU (each compile costs seconds): a case
// whose arguments name a command that compiles or launches gets `--manifest` of a file whose only
// line fails validation, which the tool reads, and refuses, before any compile or device work;
// every manifest ends with such a line; and CONV3DJIT_COMPILE=never turns a miss into an error.
// Every path the tool sees is relative to WORKDIR, its working directory.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace {

using Rng = std::mt19937_64;

// A case's time limit: reading and refusing takes milliseconds, even under ASan; a compile
// would take seconds.
constexpr unsigned kLimitSeconds = 30;
// C = 3 is not divisible by groups = 2: refused by validation, whatever came before it.
constexpr const char* kPoisonLine = R"({"input": [1, 3, 8, 8, 8], "out_channels": 4, "kernel": 3, "groups": 2})";

const std::vector<std::string> kValidLines = {
    R"({"name": "small", "input": [1, 4, 8, 8, 8], "out_channels": 8, "kernel": [3, 3, 3]})",
    R"({"input": [2, 64, 16, 56, 56], "out_channels": 64, "kernel": 3, "padding": 1, "groups": 64})",
    R"({"input": [1, 3, 9, 17, 33], "out_channels": 6, "kernel": [3, 5, 7], "stride": [1, 2, 1], "padding": "valid"})",
    R"({"input": [1, 8, 8, 8, 8], "out_channels": 16, "kernel": 1, "dilation": [1, 2, 1], "bias": true, "precision": "tf32"})",
    R"({"input": [4, 16, 8, 8, 8], "out_channels": 32, "kernel": [3, 1, 3], "padding": "same", "groups": 4})",
    R"({"input": [1, 16, 3, 8, 8], "out_channels": 16, "kernel": 3, "padding": [0, 1, 1], "dtype": "bf16", "layout": "ndhwc", "fp32_output": true})",
};

const std::vector<std::string> kNumbers = {
    "0", "-1", "1", "3", "2147483648", "4294967296", "1073741824", "9223372036854775807",
    "9223372036854775808", "-9223372036854775808", "-9223372036854775809", "18446744073709551615",
    "18446744073709551616", "1e309", "-1e309", "1e-400", "1.5", "1e3", "-0", "00", "0x10", "NaN",
    "Infinity", "99999999999999999999999999999999999999"};

const std::vector<std::string> kJsonValues = {
    "\"x\"", "\"\"", "true", "false", "null", "{}", "[]", "[[1]]", "{\"a\": 1}", "[1, \"2\", 3]",
    "\"same\"", "\"SAME\"", "[1, 2, 3, 4, 5, 6]", "[-1, -1, -1]", "\"fp16\"", "\"NDHWC\""};

const std::vector<std::string> kUnicode = {
    "\xc3\xa9", "\\u00e9", "\\ud800", "\\udfff\\ud800", "\\u0000", "\xef\xbb\xbf", "\xc0\xaf",
    "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xff", "\xe2\x80\xae", "\xf0\x9f\x98\x80", "\t", "\r"};

const std::vector<std::string> kKeys = {"input", "out_channels", "kernel", "stride", "padding", "dilation",
                                        "groups", "bias", "precision", "dtype", "layout", "fp32_output",
                                        "name", "Input", "kernel ", ""};

// One base argument list per command; the tool's only path arguments are relative.
const std::vector<std::vector<std::string>> kValidArgs = {
    {"precompile", "--arch", "sm_90", "--input", "1,4,8,8,8", "--out-channels", "8", "--kernel", "3,3,3"},
    {"precompile", "--arch", "sm_90", "--input", "2,64,16,56,56", "--out-channels", "64", "--kernel", "3",
     "--padding", "same", "--groups", "64", "--bias", "--json"},
    {"verify", "--input", "1,4,8,8,8", "--out-channels", "8", "--kernel", "3", "--input-range", "0,1"},
    {"run", "--input", "1,4,8,8,8", "--out-channels", "8", "--kernel", "3", "--config", "tiled:8,4", "--iters", "3"},
    {"bench", "--input", "1,4,8,8,8", "--out-channels", "8", "--kernel", "3,5,7", "--stride", "1,2,1"},
    {"tune", "--input", "1,4,8,8,8", "--out-channels", "8", "--kernel", "3", "--max-candidates", "2", "--budget-ms", "500"},
    {"--cache-dir", "cache", "list"},
    {"info", "--json"},
    {"families"},
    {"export", "archive.c3j"},
    {"import", "archive.c3j"},
    {"clear", "-v"},
};

const std::vector<std::string> kTokens = {
    "precompile", "verify", "run", "bench", "tune", "--max-candidates", "--budget-ms", "--runs", "--retune", "list", "info", "clear", "export", "import", "families",
    "--input", "--out-channels", "--kernel", "--stride", "--padding", "--dilation", "--groups", "--bias",
    "--precision", "--dtype", "--layout", "--fp32-output", "bf16", "ndhwc", "--manifest", "--arch", "--cache-dir", "--json", "-j", "--repeat", "--config",
    "--iters", "--warmup", "--seed", "--input-range", "--input-offset", "--help", "--version", "-v",
    "--", "-", "", "=", ",", ",,", "1,2", "1,1,1,1,1,1", "same", "valid", "fp16", "sm_90", "sm_99999999999",
    "90", "manifest.jsonl", "missing.jsonl", "cache", "archive.c3j", "igemm_sm90:th=4,tw=64,bn=64,cc=3",
    "direct:99999999999999999999", "--input=1,4,8,8,8", "--cache-dir=", "\xc3\xa9", "\xff\xfe"};

template <class T>
const T& pick(Rng& rng, const std::vector<T>& from) {
  return from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)];
}

size_t below(Rng& rng, size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng); }

// Offsets of the numbers in a line, to replace one.
std::vector<std::pair<size_t, size_t>> numbers_in(const std::string& s) {
  std::vector<std::pair<size_t, size_t>> spans;
  for (size_t i = 0; i < s.size();) {
    if (std::isdigit(static_cast<unsigned char>(s[i]))) {
      size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      spans.emplace_back(i, j - i);
      i = j;
    } else {
      ++i;
    }
  }
  return spans;
}

// Replaces the value of a key chosen at random (a flat list, or a scalar up to the next ',' or
// '}') by `value`, so that the line stays valid JSON when it was.
void replace_value(Rng& rng, std::string& s, const std::string& value) {
  const size_t colon = s.find(':', below(rng, s.size() + 1));
  if (colon == std::string::npos) return;
  size_t begin = colon + 1;
  while (begin < s.size() && s[begin] == ' ') ++begin;
  const size_t end = begin < s.size() && s[begin] == '[' ? s.find(']', begin) + 1 : s.find_first_of(",}", begin);
  s.replace(begin, end == std::string::npos || end == 0 ? std::string::npos : end - begin, value);
}

std::string mutate_line(Rng& rng, std::string s) {
  const int mutations = 1 + static_cast<int>(below(rng, 4));
  for (int m = 0; m < mutations; ++m) {
    switch (below(rng, 9)) {
      case 0:  // random bytes, any value
        for (size_t k = below(rng, 8) + 1; k > 0; --k) s.insert(below(rng, s.size() + 1), 1, static_cast<char>(below(rng, 256)));
        break;
      case 1:  // flip bits
        if (!s.empty()) s[below(rng, s.size())] ^= static_cast<char>(1u << below(rng, 8));
        break;
      case 2:  // truncate
        s.resize(below(rng, s.size() + 1));
        break;
      case 3: {  // a huge or odd number in place of one
        const auto spans = numbers_in(s);
        if (!spans.empty()) {
          const auto [at, length] = spans[below(rng, spans.size())];
          s.replace(at, length, pick(rng, kNumbers));
        }
        break;
      }
      case 4: {  // a value nested deep, sometimes unbalanced, sometimes past the line limit
        const size_t depth = below(rng, 4) == 0 ? 600000 : 1 + below(rng, 100000);
        const bool lists = below(rng, 2) == 0;
        std::string nested;
        for (size_t k = 0; k < depth; ++k) nested += lists ? "[" : "{\"a\": ";
        nested += "1";
        nested += std::string(below(rng, 3) == 0 ? depth / 2 : depth, lists ? ']' : '}');
        replace_value(rng, s, nested);
        break;
      }
      case 5: {  // a repeated or unknown key
        const size_t at = s.find('{');
        s.insert(at == std::string::npos ? 0 : at + 1,
                 "\"" + pick(rng, kKeys) + "\": " + (below(rng, 2) ? pick(rng, kNumbers) : pick(rng, kJsonValues)) + ", ");
        break;
      }
      case 6:  // a wrong type in place of a value
        replace_value(rng, s, pick(rng, kJsonValues));
        break;
      case 7:  // unicode, escaped or raw, valid or not
        s.insert(below(rng, s.size() + 1), pick(rng, kUnicode));
        break;
      case 8:  // line structure: a second line, a comment, CRLF, an empty line
        s += pick(rng, std::vector<std::string>{"\n" + s, "\n# comment", "\r", "\n\n", "\n   "});
        break;
    }
  }
  return s;
}

std::string mutate_manifest(Rng& rng) {
  std::string text;
  for (size_t lines = 1 + below(rng, 3); lines > 0; --lines) text += mutate_line(rng, pick(rng, kValidLines)) + "\n";
  return text + "\n" + kPoisonLine + "\n";
}

// No path may leave the working directory.
std::string contained(std::string token) {
  if (!token.empty() && token[0] == '/') token.insert(0, "x");
  for (size_t at; (at = token.find("..")) != std::string::npos;) token.replace(at, 2, "_");
  return token;
}

std::vector<std::string> mutate_args(Rng& rng) {
  std::vector<std::string> args = pick(rng, kValidArgs);
  const int mutations = 1 + static_cast<int>(below(rng, 4));
  for (int m = 0; m < mutations; ++m) {
    const size_t at = below(rng, args.size());
    switch (below(rng, 7)) {
      case 0: if (!args.empty()) args.erase(args.begin() + at); break;
      case 1: args.insert(args.begin() + at, pick(rng, kTokens)); break;
      case 2: if (!args.empty()) args[at] = pick(rng, kTokens); break;
      case 3: if (!args.empty()) args[at] = pick(rng, kNumbers) + (below(rng, 2) ? "," + pick(rng, kNumbers) : ""); break;
      case 4: if (!args.empty()) args.insert(args.begin() + at, args[at]); break;  // a flag twice
      case 5:
        if (!args.empty()) {
          std::string& token = args[at];
          token.insert(below(rng, token.size() + 1), 1, static_cast<char>(1 + below(rng, 255)));  // argv has no NUL
        }
        break;
      case 6: if (!args.empty()) args[at] = pick(rng, kUnicode) + args[at]; break;
    }
  }
  for (std::string& token : args) token = contained(token);
  for (const char* command : {"precompile", "verify", "run", "bench", "tune"}) {
    if (std::find(args.begin(), args.end(), command) != args.end()) {
      args.insert(args.end(), {"--manifest", "poison.jsonl"});
      break;
    }
  }
  return args;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs `cli args...` in `dir` with output to dir/output; the wait status.
int run(const std::string& cli, const std::vector<std::string>& args, const std::string& dir) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (chdir(dir.c_str()) != 0) _exit(125);
    const int out = open("output", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0) _exit(125);
    dup2(out, 1);
    dup2(out, 2);
    setenv("CONV3DJIT_CACHE_DIR", "cache", 1);
    setenv("CONV3DJIT_COMPILE", "never", 1);  // should a case get past the poison: a miss, not a compile
    alarm(kLimitSeconds);  // survives exec: a run past the limit dies of SIGALRM
    std::vector<char*> argv{const_cast<char*>(cli.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(cli.c_str(), argv.data());
    _exit(126);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

std::string quoted(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& a : args) {
    out += " '";
    for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += "'";
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::cerr << "usage: fuzz_cli CLI WORKDIR SEED CASES [CASE]\n";
    return 2;
  }
  const std::string cli = argv[1], dir = argv[2];
  const uint64_t seed = std::strtoull(argv[3], nullptr, 10);
  const long cases = std::strtol(argv[4], nullptr, 10);
  const long only = argc > 5 ? std::strtol(argv[5], nullptr, 10) : -1;
  mkdir(dir.c_str(), 0755);  // an existing folder is fine: every file in it is rewritten
  write_file(dir + "/poison.jsonl", std::string(kPoisonLine) + "\n");
  int failures = 0;
  std::map<int, int> codes;  // how many runs ended with each exit code: what the cases reached
  for (long i = 0; i < cases; ++i) {
    if (only >= 0 && i != only) continue;
    std::seed_seq seq{seed, static_cast<uint64_t>(i)};
    Rng rng(seq);
    std::vector<std::string> args;
    if (i % 2 == 0) {  // a manifest, through each command that reads one
      write_file(dir + "/manifest.jsonl", mutate_manifest(rng));
      args = pick(rng, std::vector<std::vector<std::string>>{{"precompile", "--arch", "sm_90"}, {"run"}, {"bench", "--json"}, {"tune", "--json"}});
      args.insert(args.end(), {"--manifest", "manifest.jsonl"});
    } else {
      args = mutate_args(rng);
    }
    const int status = run(cli, args, dir);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    const bool documented = code == 0 || code == 1 || code == 2 || (code >= 100 && code <= 127);
    ++codes[code];
    if (WIFEXITED(status) && documented) continue;
    ++failures;
    const std::string kept = dir + "/failure-" + std::to_string(i) + ".jsonl";
    if (i % 2 == 0) std::rename((dir + "/manifest.jsonl").c_str(), kept.c_str());
    std::string output = read_file(dir + "/output");
    if (output.size() > 4000) output = "..." + output.substr(output.size() - 4000);
    std::cout << "FAIL case " << i << ": "
              << (WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status)) +
                                            (WTERMSIG(status) == SIGALRM ? " (time limit)" : "")
                                      : "exit code " + std::to_string(code))
              << "\n  in " << dir << ":" << quoted(args) << (i % 2 == 0 ? "\n  manifest kept as " + kept : "")
              << "\n  replay: fuzz_cli " << cli << " " << dir << " " << seed << " " << cases << " " << i
              << "\n" << output << "\n";
  }
  std::cout << (only >= 0 ? 1 : cases) << " cases, " << failures << " failures (seed " << seed << "); exit codes:";
  for (const auto& [code, count] : codes) std::cout << " " << code << " x" << count;
  std::cout << "\n";
  return failures == 0 ? 0 : 1;
}
