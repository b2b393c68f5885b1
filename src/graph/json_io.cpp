// JSON files, plain or gzip (zlib), read whole and written atomically.
//
// Reading enforces the container rules of GRAPH_FORMAT.md for every roam file (graphs and
// plans): at most kMaxJsonBytes of JSON, nesting at most kMaxDepth deep, no object with a
// duplicate key, and a gzip file is one gzip stream with nothing after it.
#include "json_io.h"

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

using nlohmann::json;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Inputs larger than this (after decompression) are refused rather than read until memory runs
// out (e.g. /dev/zero). The largest benchmark graph is well below 1 GiB of JSON.
constexpr size_t kMaxJsonBytes = size_t{4} << 30;
// Deeper nesting is refused: copying or destroying such a value recurses once per level.
constexpr int kMaxDepth = 512;

struct TextScan {
  int depth = 0;         // deepest bracket nesting outside strings
  size_t colons = 0;     // ':' outside strings: the key-value pairs of a well-formed text
};

// One cheap pass before the real parse; malformed text is left for the parser to report.
TextScan scan_text(const std::string& text) {
  TextScan r;
  int depth = 0;
  bool in_string = false;
  const char* p = text.data();
  const size_t n = text.size();
  for (size_t i = 0; i < n; ++i) {
    const char ch = p[i];
    if (in_string) {
      if (ch == '\\') ++i;
      else if (ch == '"') in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == ':') {
      ++r.colons;
    } else if (ch == '[' || ch == '{') {
      r.depth = std::max(r.depth, ++depth);
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  return r;
}

// Key-value pairs the parsed value holds (a duplicate key keeps one).
size_t count_pairs(const json& v) {
  size_t total = 0;
  if (v.is_object()) {
    const auto& object = v.get_ref<const json::object_t&>();
    total += object.size();
    for (const auto& item : object) {
      if (item.second.is_structured()) total += count_pairs(item.second);
    }
  } else if (v.is_array()) {
    for (const json& x : v.get_ref<const json::array_t&>()) {
      if (x.is_structured()) total += count_pairs(x);
    }
  }
  return total;
}

// The slow path, run only when the counts say that some object repeats a key: a SAX pass that
// tracks the path and every object's keys, and stops at the first repeated one.
class DuplicateKeyFinder : public nlohmann::json_sax<json> {
 public:
  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override {
    enter();
    frames_.push_back({true, {}, {}, 0});
    return true;
  }
  bool key(string_t& k) override {
    Frame& f = frames_.back();
    if (std::find(f.keys.begin(), f.keys.end(), k) != f.keys.end()) {
      found = true;
      field = path_of_parent();
      key_name = k;
      for (size_t i = 0; i + 1 < frames_.size(); ++i) pointer.push_back(frames_[i].step());
      return false;  // stop here
    }
    f.keys.push_back(k);
    f.key = k;
    return true;
  }
  bool end_object() override {
    frames_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    enter();
    frames_.push_back({false, {}, {}, -1});
    return true;
  }
  bool end_array() override {
    frames_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

  bool found = false;
  std::string field;     // e.g. "tensors[3]" (the object holding the repeated key)
  std::string key_name;  // the repeated key
  std::vector<std::pair<std::string, int64_t>> pointer;  // path of the object: (key, -1) or ("", index)

 private:
  struct Frame {
    bool object;
    std::vector<std::string> keys;
    std::string key;  // current key (objects)
    int64_t index;    // current index (arrays)
    std::pair<std::string, int64_t> step() const {
      return object ? std::pair<std::string, int64_t>{key, -1} : std::pair<std::string, int64_t>{"", index};
    }
  };
  bool value() {
    enter();
    return true;
  }
  void enter() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
  }
  std::string path_of_parent() const {
    std::string s;
    for (size_t i = 0; i + 1 < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      if (f.object)
        s += (s.empty() ? "" : ".") + f.key;
      else
        s += "[" + std::to_string(f.index) + "]";
    }
    return s;
  }
  std::vector<Frame> frames_;
};

[[noreturn]] void fail_duplicate_key(const std::string& text, const json& doc, const std::string& file) {
  DuplicateKeyFinder finder;
  json::sax_parse(text, &finder);
  if (!finder.found) {  // cannot happen: the counts differ only with a repeated key
    throw InputError(file, "(json)", "", "an object has a duplicate key");
  }
  // The id of the innermost object on the path that has one (the object holding the key, or
  // the op or tensor around a nested object such as an op's `collective`), from the parsed
  // document.
  std::string id;
  const auto id_of = [&id](const json* o) {
    if (o == nullptr || !o->is_object()) return;
    auto it = o->find("id");
    if (it != o->end() && it->is_string()) id = it->get<std::string>();
  };
  const json* obj = &doc;
  for (const auto& [k, i] : finder.pointer) {
    if (obj == nullptr) break;
    if (i < 0) {
      auto it = obj->is_object() ? obj->find(k) : obj->end();
      obj = obj->is_object() && it != obj->end() ? &*it : nullptr;
    } else {
      obj = obj->is_array() && static_cast<size_t>(i) < obj->size() ? &(*obj)[static_cast<size_t>(i)] : nullptr;
    }
    id_of(obj);
  }
  const std::string field =
      finder.field.empty() ? finder.key_name : finder.field + "." + finder.key_name;
  throw InputError(file, field, id,
                   "duplicate key '" + finder.key_name + "' in one object (each key at most once)");
}

// The whole file, at most `limit` bytes (more is refused).
std::string read_raw(const std::string& path, size_t limit) {
  FILE* in = std::fopen(path.c_str(), "rb");
  if (in == nullptr) {
    throw InputError(path, "(file)", "", std::string("cannot open: ") + std::strerror(errno));
  }
  std::string data;
  char buf[1 << 16];
  size_t got = 0;
  while ((got = std::fread(buf, 1, sizeof buf, in)) > 0) {
    data.append(buf, got);
    if (data.size() > limit) {
      std::fclose(in);
      throw InputError(path, "(file)", "", "larger than " + std::to_string(limit >> 30) +
                                               " GiB; refusing to read it");
    }
  }
  const bool failed = std::ferror(in) != 0;
  const int err = errno;
  std::fclose(in);
  if (failed) throw InputError(path, "(file)", "", std::string("cannot read: ") + std::strerror(err));
  return data;
}

// One gzip stream, nothing after it.
std::string gunzip(const std::string& data, const std::string& path) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
    throw InputError(path, "(file)", "", "cannot decompress: zlib initialisation failed");
  }
  std::string text;
  // The trailer's ISIZE (length mod 2^32) is a good first guess at the length.
  if (data.size() >= 18) {
    const auto* end = reinterpret_cast<const unsigned char*>(data.data() + data.size());
    const size_t isize = size_t{end[-4]} | size_t{end[-3]} << 8 | size_t{end[-2]} << 16 | size_t{end[-1]} << 24;
    text.reserve(std::min(isize, kMaxJsonBytes) + 1);
  }
  char buf[1 << 16];
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  size_t left = data.size();
  int rc = Z_OK;
  std::string problem;
  while (rc != Z_STREAM_END) {
    if (zs.avail_in == 0) {
      if (left == 0) {
        problem = "truncated gzip stream";
        break;
      }
      const auto chunk = static_cast<uInt>(std::min<size_t>(left, 1u << 30));
      zs.avail_in = chunk;
      left -= chunk;
    }
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
      problem = zs.msg != nullptr ? zs.msg : "corrupt gzip stream";
      break;
    }
    text.append(buf, sizeof buf - zs.avail_out);
    if (text.size() > kMaxJsonBytes) {
      problem = "larger than " + std::to_string(kMaxJsonBytes >> 30) + " GiB of JSON; refusing to read it";
      break;
    }
    if (rc == Z_BUF_ERROR && zs.avail_in == 0 && left == 0) {
      problem = "truncated gzip stream";
      break;
    }
  }
  const size_t trailing = zs.avail_in + left;
  inflateEnd(&zs);
  if (!problem.empty()) throw InputError(path, "(file)", "", "cannot decompress: " + problem);
  if (trailing != 0) {
    throw InputError(path, "(file)", "",
                     std::to_string(trailing) +
                         " byte(s) after the end of the gzip stream (a file holds one stream, "
                         "nothing after it)");
  }
  return text;
}

}  // namespace

nlohmann::json parse_json_text(const std::string& text, const std::string& file) {
  // JSON text has no raw NUL byte (in a string it is written \u0000); nlohmann's parser stops
  // at one, so whatever followed it would go unread.
  if (const size_t nul = text.find('\0'); nul != std::string::npos) {
    throw InputError(file, "(json)", "", "malformed JSON: a NUL byte at byte " + std::to_string(nul));
  }
  const TextScan scan = scan_text(text);
  if (scan.depth > kMaxDepth) {
    throw InputError(file, "(json)", "", "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
  }
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(file, "(json)", "", std::string("malformed JSON: ") + e.what());
  }
  if (count_pairs(doc) != scan.colons) fail_duplicate_key(text, doc, file);
  return doc;
}

nlohmann::json read_json_file(const std::string& path) {
  // The compressed file is read whole too; a gzip stream is recognised by its magic bytes, so
  // one reader serves .json and .json.gz whatever the name says.
  std::string data = read_raw(path, kMaxJsonBytes);
  if (data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f &&
      static_cast<unsigned char>(data[1]) == 0x8b) {
    data = gunzip(data, path);
  }
  return parse_json_text(data, path);
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
