// MiniMalloc CSV reader and writer (include/roam/csv_layout.h).
#include "roam/csv_layout.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

namespace roam {

namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    out.push_back(trim(line.substr(start, comma == std::string::npos ? std::string::npos
                                                                       : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string lower_case(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

enum Col { kId, kLower, kUpper, kEnd, kSize, kAlign, kIgnored };

}  // namespace

CsvLayoutProblem parse_layout_csv(const std::string& text, const std::string& file) {
  auto where = [&](size_t line) { return file + ":" + std::to_string(line); };
  std::vector<std::string> lines;
  {
    std::string cur;
    std::istringstream in(text);
    while (std::getline(in, cur)) lines.push_back(cur);
  }
  // Trailing empty lines are fine.
  while (!lines.empty() && trim(lines.back()).empty()) lines.pop_back();
  if (lines.empty()) throw InputError(where(1), "header", "", "empty file: no header row");

  const std::vector<std::string> header = split(lines[0]);
  std::vector<Col> cols;
  int pos[kIgnored] = {-1, -1, -1, -1, -1, -1};
  for (size_t c = 0; c < header.size(); ++c) {
    const std::string name = lower_case(header[c]);
    Col col;
    if (name == "id" || name == "buffer" || name == "buffer_id") col = kId;
    else if (name == "lower" || name == "start" || name == "begin") col = kLower;
    else if (name == "upper") col = kUpper;
    else if (name == "end") col = kEnd;
    else if (name == "size") col = kSize;
    else if (name == "alignment") col = kAlign;
    else if (name == "offset" || name == "hint") col = kIgnored;
    else if (name == "gaps") {
      throw InputError(where(1), "gaps", "", "the gaps column is not supported");
    } else if (name.empty()) {
      throw InputError(where(1), "header", "",
                       "empty column name in column " + std::to_string(c + 1));
    } else {
      throw InputError(where(1), header[c], "", "unknown column '" + header[c] +
                                                    "' (expected id, lower, upper or end, size, "
                                                    "alignment, offset, hint)");
    }
    if (col != kIgnored) {
      if (pos[col] >= 0) {
        throw InputError(where(1), header[c], "", "duplicate column '" + header[c] + "'");
      }
      pos[col] = static_cast<int>(c);
    }
    cols.push_back(col);
  }
  if (pos[kId] < 0) throw InputError(where(1), "id", "", "missing column 'id'");
  if (pos[kLower] < 0) throw InputError(where(1), "lower", "", "missing column 'lower'");
  if (pos[kUpper] < 0 && pos[kEnd] < 0) {
    throw InputError(where(1), "upper", "", "missing column 'upper' (or the inclusive 'end')");
  }
  if (pos[kUpper] >= 0 && pos[kEnd] >= 0) {
    throw InputError(where(1), "end", "", "both 'upper' (exclusive) and 'end' (inclusive) given");
  }
  if (pos[kSize] < 0) throw InputError(where(1), "size", "", "missing column 'size'");

  CsvLayoutProblem p;
  p.has_alignment = pos[kAlign] >= 0;
  std::unordered_map<std::string, size_t> seen;
  bool gap = false;
  size_t gap_line = 0;
  uint64_t total = 0;
  for (size_t li = 1; li < lines.size(); ++li) {
    const size_t line_no = li + 1;
    if (trim(lines[li]).empty()) {
      if (!gap) gap_line = line_no;
      gap = true;
      continue;
    }
    if (gap) {
      throw InputError(where(line_no), "row", "", "row after the empty line " +
                                                      std::to_string(gap_line));
    }
    const std::vector<std::string> f = split(lines[li]);
    const std::string id = pos[kId] < static_cast<int>(f.size()) ? f[pos[kId]] : "";
    if (f.size() != header.size()) {
      throw InputError(where(line_no), "row", id,
                       std::to_string(f.size()) + " fields, the header has " +
                           std::to_string(header.size()));
    }
    if (id.empty()) throw InputError(where(line_no), header[pos[kId]], "", "empty id");
    if (!seen.emplace(id, line_no).second) {
      throw InputError(where(line_no), header[pos[kId]], id,
                       "duplicate id (first on line " + std::to_string(seen[id]) + ")");
    }
    auto int_field = [&](Col col) -> int64_t {
      const std::string& s = f[pos[col]];
      int64_t v = 0;
      const char* b = s.data();
      const char* e = s.data() + s.size();
      if (b != e && *b == '+') ++b;
      const auto r = std::from_chars(b, e, v);
      if (s.empty() || r.ec != std::errc() || r.ptr != e) {
        throw InputError(where(line_no), header[pos[col]], id,
                         "'" + s + "' is not an integer" +
                             (r.ec == std::errc::result_out_of_range ? " in 64-bit range" : ""));
      }
      return v;
    };
    AllocBuffer b;
    b.lower = int_field(kLower);
    if (pos[kUpper] >= 0) {
      b.upper = int_field(kUpper);
    } else {
      const int64_t end = int_field(kEnd);
      if (end == std::numeric_limits<int64_t>::max()) {
        throw InputError(where(line_no), header[pos[kEnd]], id, "end too large");
      }
      b.upper = end + 1;
    }
    const int64_t size = int_field(kSize);
    if (size < 0) {
      throw InputError(where(line_no), header[pos[kSize]], id,
                       "negative size " + std::to_string(size));
    }
    if (static_cast<uint64_t>(size) > (uint64_t{1} << 61)) {
      throw InputError(where(line_no), header[pos[kSize]], id, "size above 2^61");
    }
    b.size = static_cast<uint64_t>(size);
    if (p.has_alignment) {
      const int64_t a = int_field(kAlign);
      if (a < 1 || static_cast<uint64_t>(a) > (uint64_t{1} << 61)) {
        throw InputError(where(line_no), header[pos[kAlign]], id,
                         "alignment " + std::to_string(a) + " (must be between 1 and 2^61)");
      }
      b.alignment = static_cast<uint64_t>(a);
    }
    if (b.lower >= b.upper) {
      const std::string what = pos[kUpper] >= 0
                                   ? "lower " + std::to_string(b.lower) + " >= upper " +
                                         std::to_string(b.upper) + " (upper is exclusive)"
                                   : "end " + std::to_string(b.upper - 1) + " < lower " +
                                         std::to_string(b.lower) + " (end is inclusive)";
      throw InputError(where(line_no), header[pos[pos[kUpper] >= 0 ? kUpper : kEnd]], id, what);
    }
    // The solver's arithmetic: sizes and alignments must add up to at most 2^60.
    total += b.size + b.alignment;
    if (total > (uint64_t{1} << 60)) {
      throw InputError(where(line_no), header[pos[kSize]], id,
                       "sizes and alignments add up to more than 2^60");
    }
    p.ids.push_back(id);
    p.buffers.push_back(b);
  }
  return p;
}

CsvLayoutProblem read_layout_csv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "file", "", std::string("cannot read: ") + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_layout_csv(ss.str(), path);
}

std::string layout_csv_text(const CsvLayoutProblem& problem, const std::vector<uint64_t>& offsets) {
  if (offsets.size() != problem.buffers.size()) {
    throw std::invalid_argument("layout_csv_text: " + std::to_string(offsets.size()) +
                                " offsets for " + std::to_string(problem.buffers.size()) +
                                " buffers");
  }
  std::string out = problem.has_alignment ? "id,lower,upper,size,alignment,offset\n"
                                          : "id,lower,upper,size,offset\n";
  for (size_t i = 0; i < problem.buffers.size(); ++i) {
    const AllocBuffer& b = problem.buffers[i];
    out += problem.ids[i] + "," + std::to_string(b.lower) + "," + std::to_string(b.upper) + "," +
           std::to_string(b.size) + ",";
    if (problem.has_alignment) out += std::to_string(b.alignment) + ",";
    out += std::to_string(offsets[i]) + "\n";
  }
  return out;
}

void write_layout_csv(const std::string& path, const CsvLayoutProblem& problem,
                      const std::vector<uint64_t>& offsets) {
  const std::string text = layout_csv_text(problem, offsets);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  bool ok = false;
  if (FILE* out = std::fopen(tmp.c_str(), "wb")) {
    ok = std::fwrite(text.data(), 1, text.size(), out) == text.size();
    ok = (std::fclose(out) == 0) && ok;
  }
  std::error_code ec;
  if (ok) {
    std::filesystem::rename(tmp, path, ec);
    ok = !ec;
  }
  if (!ok) {
    std::filesystem::remove(tmp, ec);
    throw std::runtime_error("cannot write " + path);
  }
}

}  // namespace roam
