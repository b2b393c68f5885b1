// Layout-only problems in MiniMalloc's CSV format (bench/minimalloc/README.md).
//
// Reading. One header row, then one row per buffer; columns are found by name (any order):
//   id (aliases buffer, buffer_id)   a non-empty string, unique
//   lower (aliases start, begin)     first time the buffer is live, a signed 64-bit integer
//   upper                            end of the lifetime, EXCLUSIVE: live on [lower, upper)
//   end                              legacy alternative to upper, INCLUSIVE: upper = end + 1
//   size                             a non-negative integer (bytes or any unit)
//   alignment (optional)             a positive integer, default 1: offset % alignment == 0
//   offset, hint (optional)          accepted and ignored (a solution file reads as a problem)
// Strict rules, each an InputError naming the file and line, the column and the buffer id:
// an empty file, a missing/duplicate/unknown column (`gaps` is not supported), both `upper` and
// `end`, a row with the wrong number of fields, a value that is not an integer or out of range,
// a negative size, alignment 0, lower >= upper, a duplicate or empty id, a non-empty row after an
// empty line, sizes and alignments adding up to more than 2^60. Fields are trimmed of spaces and
// a trailing '\r'. Trailing empty lines are fine.
//
// Writing. `id,lower,upper,size[,alignment],offset` (upper exclusive, whatever the input used),
// to a temporary file renamed over the target, so no partial file is ever left.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "roam/roam_layout.h"

namespace roam {

struct CsvLayoutProblem {
  std::vector<std::string> ids;
  std::vector<AllocBuffer> buffers;
  bool has_alignment = false;     // the input had an alignment column (written back)
};

/// Reads and validates a MiniMalloc CSV file. Throws InputError.
CsvLayoutProblem read_layout_csv(const std::string& path);

/// Parses CSV text; `file` names it in messages. Throws InputError.
CsvLayoutProblem parse_layout_csv(const std::string& text, const std::string& file);

/// The solution as CSV text (header and one row per buffer with its offset).
std::string layout_csv_text(const CsvLayoutProblem& problem, const std::vector<uint64_t>& offsets);

/// Writes the solution atomically. Throws std::runtime_error on I/O failure (nothing is left).
void write_layout_csv(const std::string& path, const CsvLayoutProblem& problem,
                      const std::vector<uint64_t>& offsets);

}  // namespace roam
