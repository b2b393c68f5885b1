// Internal: the JSON text reader behind read_json_file (include/roam/graph.h), for callers that
// hold the text in memory (the fuzz targets, tests).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace roam {

/// Parses JSON text under the rules of read_json_file: nesting at most 512 deep, no object with
/// a duplicate key. Throws InputError naming `file` (field "(json)", or the path of the object
/// that repeats a key, with that object's "id" when it has one).
nlohmann::json parse_json_text(const std::string& text, const std::string& file);

}  // namespace roam
