// JSON files, plain or gzip (zlib), read whole and written atomically.
#include <zlib.h>

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
  while ((got = gzread(in, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(got));
  int err = Z_OK;
  const char* msg = gzerror(in, &err);
  const bool failed = got < 0 || (err != Z_OK && err != Z_BUF_ERROR);
  const std::string zmsg = failed ? msg : "";
  gzclose(in);
  if (failed) throw InputError(path, "(file)", "", "cannot decompress: " + zmsg);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
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
