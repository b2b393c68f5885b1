// JSON files, plain or gzip (zlib), read whole and written atomically.
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "roam/graph.h"

namespace roam {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Inputs larger than this (after decompression) are refused rather than read until memory runs
// out (e.g. /dev/zero). The largest benchmark graph is well below 1 GiB of JSON.
constexpr size_t kMaxJsonBytes = size_t{4} << 30;
// Deeper nesting is refused: copying or destroying such a value recurses once per level.
constexpr int kMaxDepth = 512;

// Deepest bracket nesting outside strings (a cheap scan before the real parse; malformed text
// is left for the parser to report).
int nesting_depth(const std::string& text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      if (ch == '\\') ++i;
      else if (ch == '"') in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

nlohmann::json read_json_file(const std::string& path) {
  // gzread passes plain files through unchanged, so one reader serves .json and .json.gz.
  gzFile in = gzopen(path.c_str(), "rb");
  if (in == nullptr) {
    throw InputError(path, "(file)", "", std::string("cannot open: ") + std::strerror(errno));
  }
  std::string text;
  char buf[1 << 16];
  int got = 0;
  while ((got = gzread(in, buf, sizeof buf)) > 0) {
    text.append(buf, static_cast<size_t>(got));
    if (text.size() > kMaxJsonBytes) {
      gzclose(in);
      throw InputError(path, "(file)", "", "larger than " + std::to_string(kMaxJsonBytes >> 30) +
                                               " GiB of JSON; refusing to read it");
    }
  }
  int err = Z_OK;
  const char* msg = gzerror(in, &err);
  // Z_BUF_ERROR at the end means the gzip stream stopped early: a truncated file.
  const bool failed = got < 0 || err != Z_OK;
  const std::string zmsg = failed ? (err == Z_BUF_ERROR ? "truncated gzip stream" : msg) : "";
  gzclose(in);
  if (failed) throw InputError(path, "(file)", "", "cannot decompress: " + zmsg);
  if (nesting_depth(text) > kMaxDepth) {
    throw InputError(path, "(json)", "", "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path, "(json)", "", std::string("malformed JSON: ") + e.what());
  }
}

void write_json_file(const std::string& path, const nlohmann::json& doc, int indent) {
  const std::string text = doc.dump(indent) + "\n";
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  bool ok = false;
  if (ends_with(path, ".gz")) {
    gzFile out = gzopen(tmp.c_str(), "wb6");
    if (out != nullptr) {
      ok = gzwrite(out, text.data(), static_cast<unsigned>(text.size())) ==
           static_cast<int>(text.size());
      ok = (gzclose(out) == Z_OK) && ok;
    }
  } else {
    FILE* out = std::fopen(tmp.c_str(), "wb");
    if (out != nullptr) {
      ok = std::fwrite(text.data(), 1, text.size(), out) == text.size();
      ok = (std::fclose(out) == 0) && ok;
    }
  }
  std::error_code ec;
  if (ok) std::filesystem::rename(tmp, path, ec);
  if (!ok || ec) {
    std::filesystem::remove(tmp, ec);
    throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  }
}

}  // namespace roam
