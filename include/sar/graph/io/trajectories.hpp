// Trajectory datasets on disk in the layout of DeepMind's MeshGraphNets data, with NumPy arrays
// instead of TFRecords:
//   DIR/meta.json       DeepMind's: {"features": {NAME: {"type": "static" | "dynamic",
//                       "shape": [...], "dtype": "float32" | "int32" | ...}, ...},
//                       "field_names": [...] (optional: the fields' order), "dt": seconds,
//                       "trajectory_length": T}
//   DIR/train/, valid/, test/   one folder per trajectory (read in name order), each holding
//                       one NAME.npy per field: static fields without the leading 1
//                       (mesh_pos [N, 2|3], cells [C, 3|4], node_type [N] or [N, 1], any other
//                       static float field [N, W] or [N]), dynamic fields [T, N, W] (or [T, N]
//                       for W = 1). Floats may be float32 or float64, ids int32 or int64.
// train/ is required; valid/ and test/ may be missing (no trajectories). Every problem is an
// error naming the file, the trajectory and the field: a shape other than meta.json's, a
// NaN or infinite value (its step and node), a node type outside DeepMind's codes, a cell
// naming a node outside the mesh.
// write_trajectory_dataset writes the same layout (with sar's manifest and seal in meta.json,
// keys a DeepMind reader ignores) as sar::replace_directory writes a directory.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/trajectories.hpp"
#include "sar/io/npy_file.hpp"
#include "sar/io/safe_directory.hpp"

namespace sar {

/// A trajectory dataset directory as sar::replace_directory recognises it.
inline constexpr directory_kind trajectory_dataset_kind{"sar-trajectories", "meta.json"};

/// The splits of a trajectory dataset, in order.
inline constexpr const char* trajectory_splits[] = {"train", "valid", "test"};

namespace detail::trajectories {

/// An array read from a .npy file: its shape and its values as double (ids as exact
/// integers).
struct array {
  std::vector<std::int64_t> shape;
  std::vector<double> values;
};

inline array read_array(const std::filesystem::path& file, const std::string& what,
                        bool integers) {
  constexpr const char* where = "sar::read_trajectory";
  const npy_header header = read_npy_header(file, 3);
  const bool is_int = header.dtype == npy_dtype::int32 || header.dtype == npy_dtype::int64;
  const bool is_float = header.dtype == npy_dtype::float32 || header.dtype == npy_dtype::float64;
  SAR_CHECK(integers ? is_int : is_float, io_error, where, ": ", file.string(), ": ", what,
            " is ", npy_dtype_name(header.dtype), ", expected ",
            integers ? "int32 or int64" : "float32 or float64");
  std::vector<unsigned char> bytes(header.data_bytes());
  read_npy_data(file, header, bytes.data(), false);
  array a{header.shape, std::vector<double>(header.element_count())};
  for (std::size_t k = 0; k < a.values.size(); ++k) {
    switch (header.dtype) {
      case npy_dtype::int32: {
        std::int32_t v;
        std::memcpy(&v, bytes.data() + 4 * k, 4);
        a.values[k] = v;
        break;
      }
      case npy_dtype::int64: {
        std::int64_t v;
        std::memcpy(&v, bytes.data() + 8 * k, 8);
        SAR_CHECK(v >= INT32_MIN && v <= INT32_MAX, io_error, where, ": ", file.string(), ": ",
                  what, " holds ", v, " at entry ", k, ", outside int32");
        a.values[k] = static_cast<double>(v);
        break;
      }
      case npy_dtype::float32: {
        float v;
        std::memcpy(&v, bytes.data() + 4 * k, 4);
        a.values[k] = v;
        break;
      }
      default: {
        std::memcpy(&a.values[k], bytes.data() + 8 * k, 8);
        break;
      }
    }
  }
  return a;
}

/// Throws unless `a`'s shape is `expected` (or, when its last entry is 1, `expected` without
/// it); `stated` says where expected comes from.
inline void expect_shape(const array& a, std::vector<std::int64_t> expected,
                         const std::filesystem::path& file, const std::string& what) {
  bool ok = a.shape == expected;
  if (!ok && expected.back() == 1) {
    expected.pop_back();
    ok = a.shape == expected;
    expected.push_back(1);
  }
  SAR_CHECK(ok, io_error, "sar::read_trajectory: ", file.string(), ": ", what, " has shape ",
            npy_shape_string(a.shape), ", expected ", npy_shape_string(expected),
            " (from meta.json and the trajectory's mesh_pos)");
}

/// Throws naming the first NaN or infinite value of `a` (rows of `width` values; `steps`
/// rows of nodes per step when dynamic).
inline void expect_finite(const array& a, Eigen::Index nodes, Eigen::Index width,
                          bool dynamic, const std::filesystem::path& file,
                          const std::string& what) {
  for (std::size_t k = 0; k < a.values.size(); ++k) {
    if (std::isfinite(a.values[k])) continue;
    const auto row = static_cast<Eigen::Index>(k) / width;
    SAR_CHECK(false, io_error, "sar::read_trajectory: ", file.string(), ": ", what, " is ",
              a.values[k], dynamic ? message(" at step ", row / nodes, ", node ", row % nodes)
                                   : message(" at node ", row),
              ", column ", static_cast<Eigen::Index>(k) % width);
  }
}

inline std::vector<std::int64_t> shape_of(const nlohmann::json& spec, const std::string& file,
                                          const std::string& name) {
  SAR_CHECK(spec.is_object() && spec.contains("shape") && spec["shape"].is_array() &&
                spec["shape"].size() == 3 && spec.contains("type") && spec["type"].is_string(),
            io_error, "sar::read_trajectory_fields: ", file, ": feature '", name,
            "' needs \"type\" and a 3-entry \"shape\" (DeepMind's [1 or T, -1, width])");
  std::vector<std::int64_t> shape;
  for (const auto& d : spec["shape"]) {
    SAR_CHECK(d.is_number_integer(), io_error, "sar::read_trajectory_fields: ", file,
              ": feature '", name, "' has a shape entry ", d.dump());
    shape.push_back(d.get<std::int64_t>());
  }
  return shape;
}

}  // namespace detail::trajectories

/// The fields of the trajectory dataset `dir` (its meta.json; see the top of this file).
/// Throws sar::io_error naming meta.json for a missing or malformed file, a field without a
/// type or shape, mesh_pos not 2 or 3 wide, cells not 3 or 4 wide or node_type not 1 wide or
/// not integers, an integer field besides these, no dynamic field, a dynamic field whose steps
/// differ from trajectory_length, or a missing or non-positive dt or trajectory_length.
inline trajectory_fields read_trajectory_fields(const std::filesystem::path& dir) {
  namespace tr = detail::trajectories;
  constexpr const char* where = "sar::read_trajectory_fields";
  const std::string file = (dir / "meta.json").string();
  std::ifstream in(file);
  SAR_CHECK(in.good(), io_error, where, ": cannot open ", file,
            " (a trajectory dataset has DeepMind's meta.json)");
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw io_error(message(where, ": ", file, ": not JSON: ", e.what()));
  }
  SAR_CHECK(meta.is_object() && meta.contains("features") && meta["features"].is_object(),
            io_error, where, ": ", file, ": no \"features\" map");
  trajectory_fields f;
  SAR_CHECK(meta.contains("trajectory_length") && meta["trajectory_length"].is_number_integer() &&
                meta["trajectory_length"].get<std::int64_t>() >= 2 &&
                meta["trajectory_length"].get<std::int64_t>() < (1 << 30),
            io_error, where, ": ", file, ": \"trajectory_length\" must be an integer >= 2");
  f.length = meta["trajectory_length"].get<int>();
  SAR_CHECK(meta.contains("dt") && meta["dt"].is_number() && meta["dt"].get<double>() > 0,
            io_error, where, ": ", file, ": \"dt\" must be a positive number");
  f.dt = meta["dt"].get<double>();
  const auto& features = meta["features"];
  std::vector<std::string> order;
  if (meta.contains("field_names") && meta["field_names"].is_array()) {
    for (const auto& n : meta["field_names"]) {
      SAR_CHECK(n.is_string() && features.contains(n.get<std::string>()), io_error, where, ": ",
                file, ": field_names lists ", n.dump(), ", which \"features\" does not have");
      order.push_back(n.get<std::string>());
    }
    SAR_CHECK(order.size() == features.size(), io_error, where, ": ", file, ": field_names has ",
              order.size(), " names for ", features.size(), " features");
  } else {
    for (const auto& [name, spec] : features.items()) order.push_back(name);
  }
  bool have_pos = false, have_cells = false, have_types = false;
  for (const std::string& name : order) {
    const auto& spec = features[name];
    const std::vector<std::int64_t> shape = tr::shape_of(spec, file, name);
    const std::string type = spec["type"].get<std::string>();
    const std::string dtype = spec.value("dtype", std::string("float32"));
    SAR_CHECK(type == "static" || type == "dynamic", io_error, where, ": ", file, ": feature '",
              name, "' has type '", type, "' (static or dynamic)");
    SAR_CHECK(dtype == "float32" || dtype == "float64" || dtype == "int32" || dtype == "int64",
              io_error, where, ": ", file, ": feature '", name, "' has dtype '", dtype,
              "' (float32, float64, int32 or int64)");
    const bool integer = dtype.starts_with("int");
    const std::int64_t width = shape[2];
    const bool is_static = type == "static";
    SAR_CHECK(width >= 1 && width < (1 << 20) && (is_static ? shape[0] == 1 : shape[0] == f.length),
              io_error, where, ": ", file, ": feature '", name, "' has shape ",
              nlohmann::json(shape).dump(), is_static ? " (a static field's is [1, -1, width])"
                                                      : message(" (a dynamic field's is [",
                                                                f.length, ", -1, width])"));
    if (name == "mesh_pos" || name == "cells" || name == "node_type") {
      const bool ok = is_static && integer == (name != "mesh_pos") &&
                      (name == "mesh_pos"    ? width == 2 || width == 3
                       : name == "cells"     ? width == 3 || width == 4
                                             : width == 1);
      SAR_CHECK(ok, io_error, where, ": ", file, ": feature '", name, "' is ", type, " ", dtype,
                " of width ", width, " (expected static ",
                name == "mesh_pos" ? "floats of width 2 or 3"
                : name == "cells"  ? "integers of width 3 or 4"
                                   : "integers of width 1", ")");
      if (name == "mesh_pos") have_pos = true, f.dimensions = width;
      if (name == "cells") have_cells = true, f.corners = static_cast<int>(width);
      if (name == "node_type") have_types = true;
      continue;
    }
    SAR_CHECK(!integer, io_error, where, ": ", file, ": feature '", name, "' is ", dtype,
              " (integer fields other than cells and node_type are not read)");
    (is_static ? f.static_inputs : f.dynamic).push_back(name);
    (is_static ? f.static_widths : f.dynamic_widths).push_back(width);
  }
  SAR_CHECK(have_pos && have_cells && have_types && !f.dynamic.empty(), io_error, where, ": ",
            file, ": a trajectory dataset needs the static fields mesh_pos, cells and node_type "
            "and at least one dynamic field");
  return f;
}

/// The trajectory `name` ("test/traj_0003": a folder under `dir`) of the dataset `dir` whose
/// fields are `f`, its graph connected. Throws sar::io_error naming the file, the trajectory
/// and the field (see the top of this file).
inline trajectory read_trajectory(const std::filesystem::path& dir, const trajectory_fields& f,
                                  const std::string& name) {
  namespace tr = detail::trajectories;
  constexpr const char* where = "sar::read_trajectory";
  const std::filesystem::path folder = dir / name;
  SAR_CHECK(std::filesystem::is_directory(folder), io_error, where, ": no trajectory folder ",
            folder.string());
  trajectory t;
  t.name = name;
  const auto field = [&](const std::string& field) { return "field '" + field + "' of " + name; };
  const auto pos_file = folder / "mesh_pos.npy";
  const tr::array pos = tr::read_array(pos_file, field("mesh_pos"), false);
  SAR_CHECK(pos.shape.size() == 2 && pos.shape[1] == f.dimensions && pos.shape[0] >= 1 &&
                pos.shape[0] < (std::int64_t{1} << 31),
            io_error, where, ": ", pos_file.string(), ": ", field("mesh_pos"), " has shape ",
            npy_shape_string(pos.shape), ", expected (N, ", f.dimensions, ")");
  const std::int64_t n = pos.shape[0];
  tr::expect_finite(pos, n, f.dimensions, false, pos_file, field("mesh_pos"));
  t.mesh_pos = Eigen::Map<const matrixd>(pos.values.data(), n, f.dimensions).cast<float>();

  const auto types_file = folder / "node_type.npy";
  const tr::array types = tr::read_array(types_file, field("node_type"), true);
  tr::expect_shape(types, {n, 1}, types_file, field("node_type"));
  for (std::size_t k = 0; k < types.values.size(); ++k) {
    const double code = types.values[k];
    SAR_CHECK(code >= 0 && code < mesh_node_types, io_error, where, ": ", types_file.string(),
              ": ", field("node_type"), ": node ", k, " has the type ", code,
              " (DeepMind's codes are 0 to ", mesh_node_types - 1, ")");
    t.node_type.push_back(static_cast<std::int32_t>(code));
  }

  const auto cells_file = folder / "cells.npy";
  const tr::array cells = tr::read_array(cells_file, field("cells"), true);
  SAR_CHECK(cells.shape.size() == 2 && cells.shape[1] == f.corners, io_error, where, ": ",
            cells_file.string(), ": ", field("cells"), " has shape ",
            npy_shape_string(cells.shape), ", expected (C, ", f.corners, ")");
  for (const double id : cells.values) t.cells.push_back(static_cast<std::int32_t>(id));

  t.static_inputs.resize(n, f.static_width());
  for (std::size_t k = 0, column = 0; k < f.static_inputs.size(); ++k) {
    const auto file = folder / (f.static_inputs[k] + ".npy");
    const Eigen::Index w = f.static_widths[k];
    const tr::array a = tr::read_array(file, field(f.static_inputs[k]), false);
    tr::expect_shape(a, {n, w}, file, field(f.static_inputs[k]));
    tr::expect_finite(a, n, w, false, file, field(f.static_inputs[k]));
    t.static_inputs.middleCols(static_cast<Eigen::Index>(column), w) =
        Eigen::Map<const matrixd>(a.values.data(), n, w).cast<float>();
    column += static_cast<std::size_t>(w);
  }
  t.states.assign(static_cast<std::size_t>(f.length), matrixf(n, f.state_width()));
  for (std::size_t k = 0, column = 0; k < f.dynamic.size(); ++k) {
    const auto file = folder / (f.dynamic[k] + ".npy");
    const Eigen::Index w = f.dynamic_widths[k];
    const tr::array a = tr::read_array(file, field(f.dynamic[k]), false);
    tr::expect_shape(a, {f.length, n, w}, file, field(f.dynamic[k]));
    tr::expect_finite(a, n, w, true, file, field(f.dynamic[k]));
    for (int s = 0; s < f.length; ++s)
      t.states[static_cast<std::size_t>(s)].middleCols(static_cast<Eigen::Index>(column), w) =
          Eigen::Map<const matrixd>(a.values.data() + static_cast<std::size_t>(s * n * w), n, w)
              .cast<float>();
    column += static_cast<std::size_t>(w);
  }
  try {
    t.connect(f.corners);
  } catch (const invalid_argument& e) {
    throw io_error(message(where, ": ", cells_file.string(), ": ", field("cells"), ": ",
                           e.what()));
  }
  return t;
}

/// The trajectory dataset `dir` (see the top of this file): its fields and every trajectory of
/// its splits, in name order. Throws sar::io_error as read_trajectory_fields and
/// read_trajectory do, or for a missing or empty train/.
inline trajectory_dataset read_trajectory_dataset(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  trajectory_dataset d;
  const fs::path path = fs::absolute(dir).lexically_normal();
  d.name = (path.has_filename() ? path : path.parent_path()).filename().string();
  d.fields = read_trajectory_fields(dir);
  for (const char* split : trajectory_splits) {
    std::vector<trajectory>& list = d.split(split);
    if (!fs::is_directory(dir / split)) continue;
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir / split))
      if (entry.is_directory()) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    for (const std::string& name : names)
      list.push_back(read_trajectory(dir, d.fields, std::string(split) + "/" + name));
  }
  SAR_CHECK(!d.train.empty(), io_error, "sar::read_trajectory_dataset: ", (dir / "train").string(),
            ": no training trajectory (one folder per trajectory)");
  return d;
}

/// Adds `states` (a trajectory's or a rollout's: T states of N nodes x f.state_width(), the
/// columns of f.dynamic in order) to `out` as one float32 [T, N, W] file per dynamic field,
/// named prefix + NAME + ".npy". Throws sar::invalid_argument for states of another width or
/// node count, sar::io_error naming the file.
inline void write_dynamic_fields(directory_writer& out, const trajectory_fields& f,
                                 std::span<const matrixf> states, const std::string& prefix = "") {
  const Eigen::Index n = states.empty() ? 0 : states.front().rows();
  for (const matrixf& state : states)
    SAR_CHECK(state.rows() == n && state.cols() == f.state_width(), invalid_argument,
              "sar::write_dynamic_fields: a state of ", state.rows(), " x ", state.cols(),
              ", expected ", n, " x ", f.state_width());
  for (std::size_t k = 0, column = 0; k < f.dynamic.size(); ++k) {
    const Eigen::Index w = f.dynamic_widths[k];
    std::vector<float> values;
    values.reserve(states.size() * static_cast<std::size_t>(n * w));
    for (const matrixf& state : states)
      for (Eigen::Index i = 0; i < n; ++i)
        for (Eigen::Index c = 0; c < w; ++c)
          values.push_back(state(i, static_cast<Eigen::Index>(column) + c));
    const std::vector<std::int64_t> shape{static_cast<std::int64_t>(states.size()), n, w};
    out.add_file(prefix + f.dynamic[k] + ".npy", [&](const std::filesystem::path& p) {
      return write_npy(p, npy_dtype::float32, shape, values.data());
    });
    column += static_cast<std::size_t>(w);
  }
}

namespace detail::trajectories {
/// DeepMind's meta.json of fields `f` (with sar's format name).
inline nlohmann::json meta_json(const trajectory_fields& f) {
  nlohmann::json features = nlohmann::json::object();
  std::vector<std::string> names{"cells", "mesh_pos", "node_type"};
  features["cells"] = {{"type", "static"}, {"shape", {1, -1, f.corners}}, {"dtype", "int32"}};
  features["mesh_pos"] = {{"type", "static"}, {"shape", {1, -1, f.dimensions}},
                          {"dtype", "float32"}};
  features["node_type"] = {{"type", "static"}, {"shape", {1, -1, 1}}, {"dtype", "int32"}};
  for (std::size_t k = 0; k < f.static_inputs.size(); ++k) {
    features[f.static_inputs[k]] = {
        {"type", "static"}, {"shape", {1, -1, f.static_widths[k]}}, {"dtype", "float32"}};
    names.push_back(f.static_inputs[k]);
  }
  for (std::size_t k = 0; k < f.dynamic.size(); ++k) {
    features[f.dynamic[k]] = {
        {"type", "dynamic"}, {"shape", {f.length, -1, f.dynamic_widths[k]}}, {"dtype", "float32"}};
    names.push_back(f.dynamic[k]);
  }
  return {{"format", std::string(trajectory_dataset_kind.format)}, {"simulator", "sar"},
          {"dt", f.dt}, {"trajectory_length", f.length}, {"features", features},
          {"field_names", names}};
}

/// Writes trajectory t's fields into `out` under t.name.
inline void write_trajectory(directory_writer& out, const trajectory_fields& f,
                             const trajectory& t) {
  out.make_directory(t.name);
  const auto n = static_cast<std::int64_t>(t.num_nodes());
  const auto add = [&](const std::string& field, npy_dtype dtype,
                       std::vector<std::int64_t> shape, const void* data) {
    out.add_file(t.name + "/" + field + ".npy", [&](const std::filesystem::path& p) {
      return write_npy(p, dtype, shape, data);
    });
  };
  const matrixf pos = t.mesh_pos;
  add("mesh_pos", npy_dtype::float32, {n, f.dimensions}, pos.data());
  add("cells", npy_dtype::int32,
      {static_cast<std::int64_t>(t.cells.size()) / f.corners, f.corners}, t.cells.data());
  add("node_type", npy_dtype::int32, {n}, t.node_type.data());
  for (std::size_t k = 0, column = 0; k < f.static_inputs.size(); ++k) {
    const Eigen::Index w = f.static_widths[k];
    const matrixf a = t.static_inputs.middleCols(static_cast<Eigen::Index>(column), w);
    add(f.static_inputs[k], npy_dtype::float32, {n, w}, a.data());
    column += static_cast<std::size_t>(w);
  }
  write_dynamic_fields(out, f, t.states, t.name + "/");
}
}  // namespace detail::trajectories

/// Writes `d` as a trajectory dataset directory `dir` (see the top of this file) as
/// sar::replace_directory writes: `dir` is created if missing; a trajectory dataset sar wrote
/// there is replaced only once the new one is complete; any other non-empty directory is
/// refused and left untouched. Requires every trajectory named "SPLIT/FOLDER" with its
/// split's name. Throws sar::invalid_argument otherwise, sar::io_error naming the path.
inline void write_trajectory_dataset(const std::filesystem::path& dir,
                                     const trajectory_dataset& d) {
  constexpr const char* where = "sar::write_trajectory_dataset";
  replace_directory(dir, trajectory_dataset_kind,
                    [&](directory_writer& out) {
                      for (const char* split : trajectory_splits) {
                        const auto& list = d.split(split);
                        if (list.empty()) continue;
                        out.make_directory(split);
                        for (const trajectory& t : list) {
                          SAR_CHECK(t.name.starts_with(std::string(split) + "/"),
                                    invalid_argument, where, ": trajectory '", t.name,
                                    "' of the ", split, " split");
                          detail::trajectories::write_trajectory(out, d.fields, t);
                        }
                      }
                      out.write_metadata(detail::trajectories::meta_json(d.fields));
                    },
                    where);
}

}  // namespace sar
