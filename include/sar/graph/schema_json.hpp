// A graph_schema (sar/graph/schema.hpp) as the JSON object that metadata files (a .npy
// dataset's or a partition store's meta.json, a model file) record:
//   {"node_types": [{"name": "paper", "count": 736389, "feature_dim": 128}, ...],
//    "relations": [{"source": "author", "name": "writes", "destination": "paper"}, ...]}
// Relations name their types, so the object reads without knowing the type order.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "sar/core/error.hpp"
#include "sar/graph/schema.hpp"

namespace sar {

/// The JSON object of `schema` (see the top of this file).
inline nlohmann::json schema_to_json(const graph_schema& schema) {
  nlohmann::json types = nlohmann::json::array(), relations = nlohmann::json::array();
  for (const node_type& t : schema.node_types)
    types.push_back({{"name", t.name}, {"count", t.count}, {"feature_dim", t.feature_dim}});
  for (const relation& r : schema.relations)
    relations.push_back(
        {{"source", schema.node_types[static_cast<std::size_t>(r.source_type)].name},
         {"name", r.name},
         {"destination", schema.node_types[static_cast<std::size_t>(r.destination_type)].name}});
  return {{"node_types", types}, {"relations", relations}};
}

/// The schema of a JSON object written by schema_to_json. Throws Exception naming `where`
/// (the file) and the field for a missing field, a value of the wrong type, or a relation
/// naming an unknown node type; the schema's own checks are graph_schema::validate's.
template <class Exception = io_error>
graph_schema schema_from_json(const nlohmann::json& j, const std::string& where) {
  const auto fail = [&](const std::string& what) {
    throw Exception(message(where, ": \"schema\": ", what));
  };
  if (!j.is_object() || !j.contains("node_types") || !j["node_types"].is_array() ||
      !j.contains("relations") || !j["relations"].is_array())
    fail("expected an object with the arrays \"node_types\" and \"relations\"");
  graph_schema schema;
  for (const auto& t : j["node_types"]) {
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || !t.contains("count") ||
        !t["count"].is_number_integer() || !t.contains("feature_dim") ||
        !t["feature_dim"].is_number_integer())
      fail("a node type needs \"name\" (a string), \"count\" and \"feature_dim\" (integers): " +
           t.dump());
    schema.node_types.push_back(
        {t["name"].get<std::string>(), t["count"].get<node_t>(), t["feature_dim"].get<std::int64_t>()});
  }
  const auto type_named = [&](const nlohmann::json& name) {
    for (std::size_t k = 0; k < schema.node_types.size(); ++k)
      if (name.is_string() && schema.node_types[k].name == name.get<std::string>())
        return static_cast<std::int32_t>(k);
    fail("a relation names the node type " + name.dump() + ", which is not listed");
    return std::int32_t{-1};
  };
  for (const auto& r : j["relations"]) {
    if (!r.is_object() || !r.contains("source") || !r.contains("destination") ||
        !r.contains("name") || !r["name"].is_string())
      fail("a relation needs \"source\", \"name\" and \"destination\": " + r.dump());
    schema.relations.push_back(
        {type_named(r["source"]), r["name"].get<std::string>(), type_named(r["destination"])});
  }
  return schema;
}

}  // namespace sar
