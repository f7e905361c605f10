// Reading an Open Graph Benchmark heterogeneous node-property dataset (ogbn-mag's raw layout,
// OGB's read_heterograph_raw) as one typed graph (sar/graph/schema.hpp). read_ogb_raw (and so
// load_dataset) reads it for a directory with raw/num-node-dict.csv.gz; the layout is at
// read_heterogeneous below and in docs/heterogeneous-data.md.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/dataset.hpp"
#include "sar/graph/heterogeneous.hpp"
#include "sar/graph/io/ogb.hpp"
#include "sar/graph/io/text.hpp"
#include "sar/graph/schema.hpp"

namespace sar::detail::ogb {

/// The comma-separated fields of `line`, each trimmed (one empty field for an empty line).
inline std::vector<std::string_view> comma_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  for (;;) {
    const std::size_t comma = line.find(',');
    fields.push_back(io::trim(line.substr(0, comma)));
    if (comma == std::string_view::npos) return fields;
    line.remove_prefix(comma + 1);
  }
}

/// The node types of `file` (raw/num-node-dict): line 1 their names, comma-separated, line 2
/// their counts, in the same order (blank lines after them are ignored); feature_dim 0.
/// Throws sar::io_error naming the file and line of an empty or repeated name, a name holding
/// "___" (which separates the parts of a relation's directory name), a count that is not a
/// non-negative integer, more or fewer counts than names, a missing line, a line of another
/// graph, or counts whose sum overflows.
inline std::vector<node_type> read_node_types(const std::filesystem::path& file) {
  io::line_reader reader(file, std::string(function));
  std::vector<node_type> types;
  node_t total = 0;
  std::string_view line;
  while (reader.next_line(line)) {
    const std::int64_t number = reader.line_number();
    const std::string_view content = io::trim(line);
    if (number == 1) {
      for (const std::string_view name : comma_fields(content)) {
        if (name.empty()) io::throw_parse_error(function, file, 1, "empty node type name", content);
        if (name.find("___") != std::string_view::npos)
          io::throw_parse_error(function, file, 1,
                                "a node type name may not hold \"___\" (it separates the parts "
                                "of a relation's directory name)",
                                name);
        for (const node_type& other : types)
          if (other.name == name)
            io::throw_parse_error(function, file, 1, "node type named twice", name);
        types.push_back({.name = std::string(name)});
      }
    } else if (number == 2) {
      const std::vector<std::string_view> counts = comma_fields(content);
      if (counts.size() != types.size())
        io::throw_parse_error(function, file, 2,
                              message("expected ", types.size(),
                                      " comma-separated counts (one per node type of line 1), "
                                      "got ",
                                      counts.size()),
                              content);
      for (std::size_t t = 0; t < types.size(); ++t) {
        std::int64_t count = 0;
        if (!io::parse_integer(counts[t], count) || count < 0)
          io::throw_parse_error(function, file, 2,
                                message("the count of node type '", types[t].name,
                                        "' is not a non-negative integer"),
                                counts[t]);
        if (count > std::numeric_limits<node_t>::max() - total)
          io::throw_parse_error(function, file, 2, "the node counts' sum overflows", counts[t]);
        types[t].count = count;
        total += count;
      }
    } else if (!content.empty()) {
      io::throw_parse_error(function, file, number,
                            "expected two lines, the node types and their counts (one graph), "
                            "found another",
                            content);
    }
  }
  if (reader.line_number() < 2)
    io::throw_parse_error(function, file, reader.line_number(),
                          "file ends before its second line (expected a line of node type names "
                          "and a line of their counts)",
                          "");
  return types;
}

/// The node types of `schema` as a list: "author, paper".
inline std::string type_list(const graph_schema& schema) {
  std::string list;
  for (const node_type& t : schema.node_types) list += (list.empty() ? "" : ", ") + t.name;
  return list;
}

/// The index of the node type `name` of `schema`, -1 if none.
inline std::int32_t find_type(const graph_schema& schema, std::string_view name) {
  for (std::int32_t t = 0; t < schema.num_node_types(); ++t)
    if (schema.node_types[static_cast<std::size_t>(t)].name == name) return t;
  return -1;
}

/// Throws sar::io_error naming the directory unless every subdirectory of `parent` (if it
/// exists) is named after a node type of `schema`, which `type_file` lists.
inline void check_type_directories(const std::filesystem::path& parent, const graph_schema& schema,
                                   const std::filesystem::path& type_file) {
  if (!std::filesystem::is_directory(parent)) return;
  for (const auto& entry : std::filesystem::directory_iterator(parent))
    SAR_CHECK(!entry.is_directory() || find_type(schema, entry.path().filename().string()) >= 0,
              io_error, function, ": ", entry.path().string(), ": '",
              entry.path().filename().string(), "' is not a node type of ", type_file.string(),
              " (", type_list(schema), ")");
}

/// A relation and its directory raw/relations/<source>___<name>___<destination>.
struct relation_directory {
  relation rel;
  std::filesystem::path dir;
};

/// The relations of `raw`/relations, one per subdirectory "<source>___<name>___<destination>"
/// joining node types of `schema` (listed by `type_file`), in OGB's order: sorted by (source,
/// name, destination). If raw/triplet-type-list.csv[.gz] exists, it must list exactly these
/// ("source,name,destination" per line). Throws sar::io_error naming the directory for a
/// missing or empty relations/ directory, a name of other than three parts or naming an
/// unknown node type, a relation the triplet list omits; naming the file and line for a
/// triplet line that is malformed, repeated or names no relation directory.
inline std::vector<relation_directory> find_relations(const std::filesystem::path& raw,
                                                      const graph_schema& schema,
                                                      const std::filesystem::path& type_file) {
  namespace fs = std::filesystem;
  const fs::path root = raw / "relations";
  SAR_CHECK(fs::is_directory(root), io_error, function, ": missing directory ", root.string(),
            " (one subdirectory <source>___<relation>___<destination> per relation)");
  std::vector<relation_directory> found;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (!entry.is_directory()) continue;
    const std::string name = entry.path().filename().string();
    const std::size_t first = name.find("___"), last = name.rfind("___");
    SAR_CHECK(first != std::string::npos && first != last &&
                  name.substr(first + 3, last - first - 3).find("___") == std::string::npos,
              io_error, function, ": ", entry.path().string(),
              ": a relation directory is named <source>___<relation>___<destination>");
    const std::string parts[3] = {name.substr(0, first), name.substr(first + 3, last - first - 3),
                                  name.substr(last + 3)};
    const std::int32_t ends[2] = {find_type(schema, parts[0]), find_type(schema, parts[2])};
    for (const int end : {0, 1})
      SAR_CHECK(ends[end] >= 0, io_error, function, ": ", entry.path().string(),
                ": the relation's ", end == 0 ? "source" : "destination", " type '",
                parts[2 * end], "' is not a node type of ", type_file.string(), " (",
                type_list(schema), ")");
    SAR_CHECK(!parts[1].empty(), io_error, function, ": ", entry.path().string(),
              ": the relation's name is empty");
    found.push_back({{ends[0], parts[1], ends[1]}, entry.path()});
  }
  SAR_CHECK(!found.empty(), io_error, function, ": ", root.string(),
            " holds no relation directory (<source>___<relation>___<destination>)");
  const auto names = [&](const relation_directory& r) {
    return std::tie(schema.node_types[static_cast<std::size_t>(r.rel.source_type)].name,
                    r.rel.name,
                    schema.node_types[static_cast<std::size_t>(r.rel.destination_type)].name);
  };
  std::sort(found.begin(), found.end(), [&](const relation_directory& a, const relation_directory& b) {
    return names(a) < names(b);
  });

  const auto triplets = find_csv(raw, "triplet-type-list");
  if (!triplets) return found;
  std::map<std::string, bool> listed;  // directory name -> listed yet
  for (const relation_directory& r : found) listed[r.dir.filename().string()] = false;
  io::line_reader reader(*triplets, std::string(function));
  std::string_view line;
  while (reader.next_line(line)) {
    const std::vector<std::string_view> fields = comma_fields(line);
    if (fields.size() != 3 || fields[0].empty() || fields[1].empty() || fields[2].empty())
      io::throw_parse_error(function, *triplets, reader.line_number(),
                            "expected source,relation,destination", io::trim(line));
    const std::string name = message(fields[0], "___", fields[1], "___", fields[2]);
    const auto it = listed.find(name);
    if (it == listed.end())
      io::throw_parse_error(function, *triplets, reader.line_number(),
                            message("no relation directory ", (root / name).string()),
                            io::trim(line));
    if (it->second)
      io::throw_parse_error(function, *triplets, reader.line_number(), "relation listed twice",
                            io::trim(line));
    it->second = true;
  }
  for (const auto& [name, seen] : listed)
    SAR_CHECK(seen, io_error, function, ": ", (root / name).string(), " is not listed in ",
              triplets->string());
  return found;
}

/// read_ogb_raw of a heterogeneous directory `dir` (OGB's raw layout of ogbn-mag):
///   raw/num-node-dict.csv.gz   the node types' names, comma-separated, then their counts
///                              (required): type t's nodes are the dataset ids
///                              [type_begin(t), type_begin(t + 1)), types in this order
///   raw/relations/<source>___<relation>___<destination>/   one directory per relation
///                              (at least one), relations in the order of their sorted
///                              (source, relation, destination) names, as OGB orders them:
///     edge.csv.gz              "src,dst" per line, ids local to their types (required)
///     num-edge-list.csv.gz     edge.csv.gz's line count (checked if present)
///     edge-feat.csv.gz         one row of equally many numbers per edge line (every relation
///                              or none; equally wide in every relation)
///     edge_reltype.csv.gz      ignored (the directory names the relation)
///   raw/triplet-type-list.csv.gz   "source,relation,destination" per relation (checked to
///                              list exactly the relation directories if present)
///   raw/node-feat/<type>/node-feat.csv.gz   the type's features, one row per node (optional
///                              per type)
///   raw/node-label/<type>/node-label.csv.gz the type's labels, one per node, as in the
///                              homogeneous layout (optional per type)
///   split/<name>/<type>/{train,valid,test}.csv.gz   local ids of the type (optional per type;
///                              split/<name> chosen as in the homogeneous layout)
/// Other files (nodetype-has-label, node_year, ...) are ignored; a subdirectory of node-feat,
/// node-label or split/<name> that names no node type is an error.
/// Ensures: schema = the node types (feature_dim: the width of the type's node-feat, 0
/// without) and relations; graph = build_typed_csr of every relation's edges in dataset ids
/// (directed as written: a repeat within a relation merged, self-loops kept), edge_types its
/// entries' relations; edge_features each entry's input edge's row (if the relations have
/// them); features n x F, F the widest type's, type t's rows holding its features in their
/// first feature_dim columns and zeros after; labels (empty if no type has node-label) -1 for
/// nodes of unlabelled types; num_classes stated, else the largest label + 1 (0 without
/// labels); split per node, none for types without a split; task classify.
/// Throws sar::io_error naming the file and line for any malformed line, an id outside its
/// type's count, feature or label line counts other than the type's count, an edge count
/// other than num-edge-list, a node in two splits, a label at or above a stated num_classes;
/// naming the file or directory for a relation or per-type directory naming an unknown node
/// type, edge features in some relations only or of differing widths, a total other than a
/// stated num_nodes, a stated num_classes without labels, a stated task other than classify,
/// both num-node-list and num-node-dict, a mostly empty class range (num_classes not stated),
/// fewer than half of the nodes appearing in an edge or a per-node file when a type has no
/// per-node file (num_nodes not stated), a missing required file; sar::invalid_argument for
/// options.deduplicate false or options.self_loops other than keep.
inline graph_dataset read_heterogeneous(const std::filesystem::path& dir,
                                        const ogb_options& options) {
  namespace fs = std::filesystem;
  const fs::path raw = dir / "raw";
  SAR_CHECK(options.deduplicate && options.self_loops == self_loop_policy::keep,
            invalid_argument, function, ": ", dir.string(), " is a heterogeneous dataset, whose "
            "relations are built as written (a repeat within a relation merged, self-loops "
            "kept): ogb_options::deduplicate false and self_loops other than keep do not apply");
  SAR_CHECK(!find_csv(raw, "num-node-list"), io_error, function, ": ", raw.string(),
            " holds both num-node-list (a homogeneous graph) and num-node-dict (a heterogeneous "
            "one)");
  const dataset_sizes& stated = options.sizes;
  SAR_CHECK(stated.task.value_or(task_kind::classify) == task_kind::classify, io_error, function,
            ": the task ", task_name(stated.task.value_or(task_kind::classify)), " is stated, but ",
            dir.string(), " is a heterogeneous dataset, which sar reads for node classification "
            "only (raw/node-label/<type>)");

  graph_dataset data;
  data.name = dataset_name(dir);
  graph_schema& schema = data.schema;
  const fs::path type_file = require_csv(raw, "num-node-dict");
  schema.node_types = read_node_types(type_file);
  const std::vector<node_t> begins = schema.type_begins();
  const node_t n = begins.back();
  SAR_CHECK(stated.num_nodes < 0 || n == stated.num_nodes, io_error, function, ": ",
            type_file.string(), " declares ", n, " nodes in all, but num_nodes is ",
            stated.num_nodes);
  const std::vector<relation_directory> relations = find_relations(raw, schema, type_file);
  for (const relation_directory& r : relations) schema.relations.push_back(r.rel);
  const std::int32_t types = schema.num_node_types();

  // Per type: its schema entry, first dataset id, name in errors, per-type file `kind`
  // (node-feat, node-label), rows of a per-node array.
  const auto type = [&](std::int32_t t) -> node_type& {
    return schema.node_types[static_cast<std::size_t>(t)];
  };
  const auto begin = [&](std::int32_t t) { return begins[static_cast<std::size_t>(t)]; };
  const auto unit = [&](std::int32_t t) { return message("'", type(t).name, "' nodes"); };
  const auto type_file_of = [&](const char* kind, std::int32_t t) {
    return find_csv(raw / kind / type(t).name, kind);
  };
  const auto rows_of = [&](auto& per_node, std::int32_t t) {
    return std::span(per_node).subspan(static_cast<std::size_t>(begin(t)),
                                       static_cast<std::size_t>(type(t).count));
  };
  // allocate_checked for `what` of `rows` `unit`s ("the labels of the 9 nodes in <file>").
  const auto allocate_for = [&](node_t rows, std::string unit) {
    return [&type_file, rows, unit](const std::string& what, double bytes, auto&& allocate) {
      allocate_checked(function, message(what, " of the ", rows, " ", unit, " in ",
                                         type_file.string()), bytes, allocate);
    };
  };

  // Per-type files: before anything of a type's size is allocated, each must be able to hold
  // its lines; a type without any has only num-node-dict to vouch for its count.
  std::vector<bool> vouched(static_cast<std::size_t>(types), false);
  for (const char* kind : {"node-feat", "node-label"}) {
    check_type_directories(raw / kind, schema, type_file);
    for (std::int32_t t = 0; t < types; ++t)
      if (const auto file = type_file_of(kind, t)) {
        check_line_capacity(*file, type(t).count, type_file, unit(t));
        vouched[static_cast<std::size_t>(t)] = true;
      }
  }

  // Edges in dataset ids, relation by relation (edge k of a relation: line k + 1 of its file),
  // and their edge features: every relation has them, equally wide, or none.
  edge_list edges;
  edges.num_nodes = n;
  std::vector<std::int32_t> edge_relations;
  std::vector<matrixf> edge_rows;  // per relation, if they have edge features
  std::optional<fs::path> with_edge_features, without_edge_features;  // a relation of each
  Eigen::Index edge_width = 0;     // the edge features' width, in `width_file`
  fs::path width_file;
  for (std::int32_t r = 0; r < schema.num_relations(); ++r) {
    const relation& rel = schema.relations[static_cast<std::size_t>(r)];
    const fs::path& rel_dir = relations[static_cast<std::size_t>(r)].dir;
    const fs::path file = require_csv(rel_dir, "edge");
    std::int64_t expected = -1;
    fs::path count_file;
    if (const auto found = find_csv(rel_dir, "num-edge-list")) {
      expected = read_count(*found);
      count_file = *found;
    }
    const std::size_t before = edges.size();
    const node_t bounds[2] = {type(rel.source_type).count, type(rel.destination_type).count};
    const std::int64_t lines =
        read_edge_file(file, bounds, {}, expected, count_file, edges.src, edges.dst);
    const auto read = static_cast<std::int64_t>(edges.size() - before);
    check_edge_count(file, lines, read, expected, count_file);
    for (std::size_t k = before; k < edges.size(); ++k) {
      edges.src[k] += begin(rel.source_type);
      edges.dst[k] += begin(rel.destination_type);
    }
    edge_relations.resize(edges.size(), r);

    const auto feature_file = find_csv(rel_dir, "edge-feat");
    (feature_file ? with_edge_features : without_edge_features) = feature_file.value_or(rel_dir);
    SAR_CHECK(!with_edge_features || !without_edge_features, io_error, function, ": ",
              with_edge_features->string(), " gives edge features, but ",
              without_edge_features->string(), " has no edge-feat.csv.gz: every relation has "
              "edge features, or none");
    if (!feature_file) continue;
    edge_rows.push_back(read_edge_rows(*feature_file, read, file));
    if (read == 0) continue;  // no row to tell the width
    if (width_file.empty()) {
      edge_width = edge_rows.back().cols();
      width_file = *feature_file;
    }
    SAR_CHECK(edge_rows.back().cols() == edge_width, io_error, function, ": ",
              feature_file->string(), " has ", edge_rows.back().cols(), " edge features per "
              "edge, ", width_file.string(), " ", edge_width, ": every relation's edge features "
              "are equally wide");
  }

  // Before anything of the node count's size is allocated: a type without per-node files has
  // only num-node-dict to vouch for its count, so refuse a node range that neither edges nor
  // per-node lines mostly use.
  if (stated.num_nodes < 0 && std::find(vouched.begin(), vouched.end(), false) != vouched.end()) {
    std::vector<node_t> listed;  // the nodes of the types with per-node files
    std::string unvouched;
    for (std::int32_t t = 0; t < types; ++t) {
      if (vouched[static_cast<std::size_t>(t)])
        for (node_t i = begin(t); i < begin(t + 1); ++i) listed.push_back(i);
      else
        unvouched += (unvouched.empty() ? "" : ", ") + type(t).name;
    }
    whole_input_totals totals;
    check_mostly_used<node_t>(
        totals, n, {edges.src, edges.dst, listed},
        message(function, ": ", type_file.string(), " declares ", n, " nodes (and the types ",
                unvouched, " have no node-feat or node-label file with a line per node)"),
        "appear in an edge or have such a line", "num_nodes", "--num-nodes");
  }

  // Features: each type's rows, then its leading columns of the one feature matrix.
  std::vector<matrixf> type_features(static_cast<std::size_t>(types));
  for (std::int32_t t = 0; t < types; ++t)
    if (const auto file = type_file_of("node-feat", t)) {
      matrixf& rows = type_features[static_cast<std::size_t>(t)];
      const std::string rows_unit = unit(t);
      read_rows(*file, type(t).count, 0, type(t).count, type_file, "feature", rows,
                allocate_for(type(t).count, rows_unit), rows_unit.c_str());
      type(t).feature_dim = rows.cols();
    }
  std::int64_t width = 0;
  for (const node_type& t : schema.node_types) width = std::max(width, t.feature_dim);
  allocate_for(n, message("nodes (", width, " columns: the widest type's)"))(
      "the features", 4.0 * static_cast<double>(n) * static_cast<double>(width),
      [&] { data.features.setZero(n, width); });
  for (std::int32_t t = 0; t < types; ++t) {
    matrixf& rows = type_features[static_cast<std::size_t>(t)];
    if (rows.size() > 0) data.features.block(begin(t), 0, rows.rows(), rows.cols()) = rows;
    rows = matrixf();
  }

  // Labels: -1 for the nodes of types without node-label.
  data.num_classes = stated.num_classes;
  label_maximum largest;
  fs::path largest_file;
  for (std::int32_t t = 0; t < types; ++t)
    if (const auto file = type_file_of("node-label", t)) {
      if (data.labels.empty())
        allocate_for(n, "nodes")("the labels", 4.0 * static_cast<double>(n),
                                 [&] { data.labels.assign(static_cast<std::size_t>(n), -1); });
      const label_maximum type_largest =
          read_labels(*file, type(t).count, 0, rows_of(data.labels, t), stated.num_classes,
                      type_file, unit(t));
      if (type_largest.label > largest.label) {
        largest = type_largest;
        largest_file = *file;
      }
    }
  SAR_CHECK(!data.labels.empty() || stated.num_classes < 0, io_error, function,
            ": num_classes = ", stated.num_classes, " is stated, but ", dir.string(),
            " has no labels (raw/node-label/<type>/node-label.csv.gz)");
  whole_input_totals totals;
  if (!data.labels.empty() && stated.num_classes < 0)
    count_classes(data, largest, largest_file, totals);
  data.num_classes = std::max(data.num_classes, 0);

  // Split: split/<name>/<type>/, local ids.
  if (const fs::path split_dir = split_directory(dir, options.split_name); !split_dir.empty()) {
    check_type_directories(split_dir, schema, type_file);
    allocate_for(n, "nodes")("the split", static_cast<double>(n), [&] {
      data.split.assign(static_cast<std::size_t>(n), node_split::none);
    });
    bool any = false;
    for (std::int32_t t = 0; t < types; ++t)
      if (const fs::path type_dir = split_dir / type(t).name; fs::is_directory(type_dir)) {
        read_splits(type_dir, type(t).count, 0, rows_of(data.split, t));
        any = true;
      }
    SAR_CHECK(any, io_error, function, ": ", split_dir.string(), " holds the split of no node "
              "type (expected ", (split_dir / "<type>").string(), "/{train,valid,test}.csv.gz)");
  }

  // The graph: every relation's edges, typed; each entry's edge features its input edge's.
  const bool edge_data = with_edge_features.has_value();
  const auto m = static_cast<Eigen::Index>(edges.size());
  matrixf per_edge;  // one row per input edge
  if (edge_data) {
    allocate_checked(function, message("the ", edge_width, " edge features of the ", m,
                                       " edges of ", dir.string()),
                     4.0 * static_cast<double>(m) * static_cast<double>(edge_width),
                     [&] { per_edge.resize(m, edge_width); });
    Eigen::Index row = 0;
    for (matrixf& rows : edge_rows) {
      if (rows.rows() > 0) per_edge.middleRows(row, rows.rows()) = rows;
      row += rows.rows();
      rows = matrixf();
    }
  }
  std::vector<edge_t> origins;
  allocate_checked(function, message("the graph of the ", n, " nodes in ", type_file.string()),
                   3.0 * sizeof(edge_t) * (static_cast<double>(n) + 1) +
                       static_cast<double>(m) * (2 * sizeof(node_t) + sizeof(std::int32_t) +
                                                 (edge_data ? sizeof(edge_t) : 0)),
                   [&] {
                     data.graph = build_typed_csr(edges, edge_relations, data.edge_types,
                                                  edge_data ? &origins : nullptr);
                   });
  if (edge_data) data.edge_features = take_edge_rows(per_edge, origins, function.data());
  return data;
}

/// The node count raw/num-node-dict of the heterogeneous directory `dir` declares, and the
/// edge count its relations' num-edge-list files declare (-1 unless every relation has one).
/// Throws sar::io_error as read_heterogeneous does for those files.
inline std::pair<node_t, edge_t> declared_size(const std::filesystem::path& dir) {
  const std::filesystem::path raw = dir / "raw", type_file = require_csv(raw, "num-node-dict");
  graph_schema schema;
  schema.node_types = read_node_types(type_file);
  edge_t edges = 0;
  for (const relation_directory& r : find_relations(raw, schema, type_file)) {
    const auto count_file = find_csv(r.dir, "num-edge-list");
    if (!count_file) return {schema.type_begin(schema.num_node_types()), -1};
    edges += read_count(*count_file);
  }
  return {schema.type_begin(schema.num_node_types()), edges};
}

}  // namespace sar::detail::ogb
