// Checkpoint / restart of a training run. A checkpoint is a directory (format version 3):
//   checkpoint.json        {"format": "sar-checkpoint", "format_version": 3,
//                           "scalar": "float32" | "float64", "settings": {the writer's},
//                           "progress": {history, best epoch, early-stopping state},
//                           "parameters": [{"name", "rows", "cols"}, ...],
//                           "optimiser": {"kind", "steps", "arrays": [names]},
//                           "state": [sizes], "tables": [{"name", "first_id", "end_id",
//                           "cols", "rows"}, ...], "manifest": {every file: size, CRC-32 of its
//                           data}, "metadata_crc32": the seal (sar/io/safe_directory.hpp)}
//   parameters.npy         every parameter packed back to back in store order (no padding), 1-D
//   optimiser-<name>.npy   each per-value array of the optimiser (Adam's m and v, SGD's
//                          velocity), packed alike; empty before the first step
//   state.npy              every layer's state (batch norm's running statistics), float64
//   table-<k>-ids.npy      row table k (sar/nn/parameters.hpp: embeddings): the dataset ids of
//   table-<k>-values.npy   its rows (int64, ascending), their values (rows x cols, 1-D) and
//   table-<k>-<name>.npy   each optimiser array of theirs (empty before the first step)
// The parameters, the optimiser state and batch norm's statistics are the same on every rank
// (gradients and batch statistics are all-reduced), so one rank writes, and a checkpoint taken
// on P ranks resumes on any number of ranks (exception: minibatch training with batch norm on
// several ranks keeps each rank's own running statistics; the checkpoint holds rank 0's).
// Row tables are held a part per rank: save_checkpoint gathers them to the writing rank (which
// holds every row of them then), and restore_checkpoint takes each rank's rows from the file.
// Version 2 checkpoints (no tables) are read too.
// Random numbers are keyed by (seed, epoch, ...), never by a generator's position, so a
// resumed run continues the interrupted one bit for bit.
//
//   sar::save_checkpoint(comm, dir, model, optimiser, result, settings);  // collective
//   ...
//   sar::checkpoint ck = sar::read_checkpoint(dir);
//   ck.check_settings(settings, "my-code");        // same model, data and hyper-parameters?
//   sar::restore_checkpoint(ck, model, optimiser);
//   options.resume = &ck.progress;                 // train_full_batch / train_minibatch go on
#pragma once

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sar/comm/communicator.hpp"
#include "sar/io/checksum.hpp"
#include "sar/core/error.hpp"
#include "sar/io/safe_directory.hpp"
#include "sar/io/npy_file.hpp"
#include "sar/nn/parameters.hpp"
#include "sar/optim/adam.hpp"
#include "sar/optim/sgd.hpp"
#include "sar/train/full_batch.hpp"

namespace sar {

/// 2: checkpoint.json lists a manifest and is sealed, so an edited one is named. 3: row
/// tables.
inline constexpr int checkpoint_version = 3;
/// A checkpoint directory as sar::replace_directory recognises it.
inline constexpr directory_kind checkpoint_kind{"sar-checkpoint", "checkpoint.json",
                                                "checksums"};

/// The optimiser state a checkpoint holds: the kind (a checkpoint restores only into the same
/// kind), the step count, and arrays of one value per parameter value (the store's flat
/// layout; empty before the first step). optimiser_state(o) returns it for sgd, adam and
/// adamw; an optimiser of your own provides an overload found by argument-dependent lookup.
template <class T>
struct optimiser_state_ref {
  /// Optimiser name ("sgd", "adam"): restores only into the same kind.
  std::string kind;
  /// Points to the optimiser's step count.
  std::uint64_t* steps;
  /// (name, pointer) of each per-value array ("velocity"; "m", "v").
  std::vector<std::pair<std::string, std::vector<T>*>> arrays;
};

template <class T>
optimiser_state_ref<T> optimiser_state(sgd<T>& o) {
  auto& s = o.get_state();
  return {"sgd", &s.steps, {{"velocity", &s.velocity}}};
}
template <class T>
optimiser_state_ref<T> optimiser_state(adam<T>& o) {  // and adamw
  auto& s = o.get_state();
  return {"adam", &s.steps, {{"m", &s.m}, {"v", &s.v}}};
}

/// What read_checkpoint reads: everything a checkpoint holds, the values as double (exact for
/// float32 files).
struct checkpoint {
  /// One parameter as the checkpoint lists it.
  struct parameter {
    /// Its name in the store.
    std::string name;
    /// \var rows
    /// Its rows.
    /// \var cols
    /// Its columns.
    std::int64_t rows = 0, cols = 0;
  };
  /// The directory it was read from.
  std::filesystem::path directory;
  std::uint32_t identity = 0;  ///< CRC-32 of checkpoint.json: equal copies, equal identity
  /// Element type of the stored values (float32 or float64).
  npy_dtype scalar = npy_dtype::float32;
  nlohmann::json settings;     ///< as the writer gave them
  train_result progress;       ///< for train_options::resume
  /// Every parameter, in store order.
  std::vector<parameter> parameters;
  std::vector<double> values;  ///< the parameters packed in order
  /// Optimiser name ("sgd", "adam").
  std::string optimiser_kind;
  /// The optimiser's step count.
  std::uint64_t optimiser_steps = 0;
  std::vector<std::pair<std::string, std::vector<double>>> optimiser_arrays;  ///< packed
  std::vector<std::vector<double>> state;  ///< model.state(), in order
  /// A row table as the checkpoint holds it: every row, ascending by id.
  struct table {
    /// Its name in the store.
    std::string name;
    /// \var first_id
    /// Its range of dataset ids, [first_id, end_id).
    /// \var end_id
    /// One past the range.
    /// \var cols
    /// Values per row.
    std::int64_t first_id = 0, end_id = 0, cols = 0;
    std::vector<std::int64_t> ids;  ///< of the rows, ascending
    std::vector<double> values;     ///< ids.size() x cols, row-major
    /// The optimiser's arrays of the rows, as optimiser_arrays names them (empty before the
    /// first step).
    std::vector<std::vector<double>> arrays;
  };
  /// The model's row tables, in store order.
  std::vector<table> tables;

  /// Throws sar::invalid_argument naming `where`, the directory and every differing key
  /// (with both values) unless `current` equals the settings the checkpoint was written with.
  void check_settings(const nlohmann::json& current, const std::string& where) const {
    std::string differences;
    auto note = [&](const std::string& key, const nlohmann::json& then, const nlohmann::json& now) {
      differences += message("\n  ", key, ": checkpoint ", then.is_null() ? "-" : then.dump(),
                             ", this run ", now.is_null() ? "-" : now.dump());
    };
    for (const auto& [key, then] : settings.items())
      if (!current.contains(key) || current[key] != then)
        note(key, then, current.contains(key) ? current[key] : nlohmann::json());
    for (const auto& [key, now] : current.items())
      if (!settings.contains(key)) note(key, nlohmann::json(), now);
    SAR_CHECK(differences.empty(), invalid_argument, where, ": the checkpoint ",
              directory.string(), " belongs to a run with other settings:", differences);
  }
};

namespace detail::checkpoints {

template <class T>
constexpr npy_dtype dtype_of() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  return std::is_same_v<T, float> ? npy_dtype::float32 : npy_dtype::float64;
}

/// The parameters' values in `flat` (the store's layout) back to back, without the padding.
template <class T>
std::vector<T> packed(const parameter_store<T>& store, std::span<const T> flat) {
  std::vector<T> out;
  for (std::size_t p = 0; p < store.size(); ++p) {
    const auto begin = flat.begin() + store.offset(p);
    out.insert(out.end(), begin, begin + store.shape(p).rows * store.shape(p).cols);
  }
  return out;
}

/// The inverse of packed: `values` (as many as the parameters hold) into the store's layout.
template <class T>
void unpack(const parameter_store<T>& store, std::span<const double> values, std::span<T> flat) {
  std::size_t from = 0;
  for (std::size_t p = 0; p < store.size(); ++p) {
    const auto count = static_cast<std::size_t>(store.shape(p).rows * store.shape(p).cols);
    for (std::size_t k = 0; k < count; ++k)
      flat[static_cast<std::size_t>(store.offset(p)) + k] = static_cast<T>(values[from + k]);
    from += count;
  }
}

/// Throws sar::invalid_argument naming `where` (which `holds`: " holds" or ": the file
/// holds") and the first difference unless `parameters` (names, shapes, packed `values`) and
/// `state` (layer state sizes) are those of `model`.
template <class Model>
void check_fits(const std::vector<checkpoint::parameter>& parameters, std::size_t values,
                const std::vector<std::vector<double>>& state, Model& model,
                const std::string& where) {
  const auto& store = model.parameters();
  SAR_CHECK(parameters.size() == store.size(), invalid_argument, where, " holds ",
            parameters.size(), " parameters, the model ", store.size());
  std::size_t count = 0;
  for (std::size_t p = 0; p < store.size(); ++p) {
    const auto& a = parameters[p];
    const auto& b = store.shape(p);
    SAR_CHECK(a.name == b.name && a.rows == b.rows && a.cols == b.cols, invalid_argument, where,
              ": parameter ", p, " is '", a.name, "' ", a.rows, " x ", a.cols,
              ", the model's is '", b.name, "' ", b.rows, " x ", b.cols);
    count += static_cast<std::size_t>(b.rows * b.cols);
  }
  SAR_CHECK(values == count, invalid_argument, where, " holds ", values,
            " parameter values, the model ", count);
  const auto layers = model.state();
  SAR_CHECK(state.size() == layers.size(), invalid_argument, where, " holds ", state.size(),
            " layer state arrays, the model ", layers.size());
  for (std::size_t s = 0; s < layers.size(); ++s)
    SAR_CHECK(state[s].size() == layers[s].size(), invalid_argument, where,
              ": layer state array ", s, " holds ", state[s].size(), " values, the model's ",
              layers[s].size());
}

/// Puts packed parameter `values` and layer `state` into `model` (check_fits first).
template <class Model>
void put_into(Model& model, std::span<const double> values,
              const std::vector<std::vector<double>>& state) {
  using T = typename Model::scalar;
  auto& store = model.parameters();
  unpack<T>(store, values, store.values());
  auto layers = model.state();
  for (std::size_t s = 0; s < layers.size(); ++s)
    std::copy(state[s].begin(), state[s].end(), layers[s].begin());
}

/// A number in JSON; the non-finite ones (which JSON lacks) as "nan", "inf", "-inf".
inline nlohmann::json number(double x) {
  if (std::isfinite(x)) return x;
  return std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf";
}
/// The inverse of number(). Throws nlohmann::json::type_error for anything else.
inline double number(const nlohmann::json& j) {
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s == "nan") return NAN;
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
  }
  return j.get<double>();
}

inline nlohmann::json progress_json(const train_result& r) {
  nlohmann::json history = nlohmann::json::array();
  for (const auto& e : r.history)
    history.push_back({{"epoch", e.epoch}, {"train_loss", number(e.train_loss)},
                       {"valid_loss", number(e.valid_loss)}, {"train_score", number(e.train_score)},
                       {"valid_score", number(e.valid_score)},
                       {"test_score", number(e.test_score)},
                       {"evaluated", e.evaluated}, {"seconds", number(e.seconds)},
                       {"sampling_seconds", number(e.sampling_seconds)},
                       {"gather_seconds", number(e.gather_seconds)},
                       {"peak_memory_bytes", e.peak_memory_bytes}});
  return {{"history", history}, {"best_epoch", r.best_epoch},
          {"best_valid_score", number(r.best_valid_score)},
          {"test_score", number(r.test_score)},
          {"best_valid_loss", number(r.best_valid_loss)},
          {"lowest_valid_loss", number(r.lowest_valid_loss)},
          {"stale_evaluations", r.stale_evaluations}};
}

/// j as an int in [-1, 2^31): throws sar::io_error naming `file` and `field` otherwise.
inline int small_integer(const nlohmann::json& j, const std::string& file, const char* field) {
  SAR_CHECK(j.is_number_integer() && j.get<std::int64_t>() >= -1 &&
                j.get<std::int64_t>() <= std::numeric_limits<int>::max(),
            io_error, "sar::read_checkpoint: ", file, ": ", field, " is ", j.dump(),
            ", not an integer in [-1, 2^31)");
  return static_cast<int>(j.get<std::int64_t>());
}

/// j[name], or j[old_name] in a checkpoint written before the task's score replaced the
/// accuracy ("train_acc" for "train_score", ...). Throws nlohmann::json::exception if neither.
inline const nlohmann::json& score_field(const nlohmann::json& j, const char* name,
                                         const char* old_name) {
  return j.contains(name) ? j.at(name) : j.at(old_name);
}

/// Throws nlohmann::json::exception on a missing or mistyped field, sar::io_error naming
/// `file` for an integer out of range.
inline train_result progress_from(const nlohmann::json& j, const std::string& file) {
  train_result r;
  for (const auto& h : j.at("history")) {
    epoch_stats e;
    e.epoch = small_integer(h.at("epoch"), file, "epoch");
    e.train_loss = number(h.at("train_loss"));
    e.valid_loss = number(h.at("valid_loss"));
    e.train_score = number(score_field(h, "train_score", "train_acc"));
    e.valid_score = number(score_field(h, "valid_score", "valid_acc"));
    e.test_score = number(score_field(h, "test_score", "test_acc"));
    e.evaluated = h.at("evaluated").get<bool>();
    e.seconds = number(h.at("seconds"));
    e.sampling_seconds = number(h.at("sampling_seconds"));
    e.gather_seconds = number(h.at("gather_seconds"));
    e.peak_memory_bytes = h.at("peak_memory_bytes").get<std::int64_t>();
    r.history.push_back(e);
  }
  r.best_epoch = small_integer(j.at("best_epoch"), file, "best_epoch");
  r.best_valid_score = number(score_field(j, "best_valid_score", "best_valid_acc"));
  r.test_score = number(score_field(j, "test_score", "test_acc"));
  r.best_valid_loss = number(j.at("best_valid_loss"));
  r.lowest_valid_loss = number(j.at("lowest_valid_loss"));
  r.stale_evaluations = small_integer(j.at("stale_evaluations"), file, "stale_evaluations");
  return r;
}

/// Reads the 1-D array `name` of dir, `count` elements of `dtype`, into `into` (room for
/// them), verifying its checksum against `listed`. Throws sar::io_error naming the file.
inline void read_listed(const std::filesystem::path& dir, const std::string& name,
                        std::uint64_t count, npy_dtype dtype, const manifest& listed,
                        void* into) {
  constexpr const char* where = "sar::read_checkpoint";
  const auto file = dir / name;
  const npy_header header =  // its size matches its shape
      npy::expect_array(file, dtype, {static_cast<std::int64_t>(count)},
                        "its parameters, optimiser, state and tables", where, "checkpoint.json");
  const auto crc_listed = listed.crc32_of(name);
  SAR_CHECK(crc_listed.has_value(), io_error, where, ": ", (dir / "checkpoint.json").string(),
            " lists no checksum of ", name);
  check_crc32(where, file.string(), read_npy_data(file, header, into, true), *crc_listed,
              "checkpoint", "checkpoint.json");
}

/// Reads the 1-D array `name` of dir: `count` elements of float32 or float64 as double,
/// verifying its checksum against `listed`. Throws sar::io_error naming the file.
inline std::vector<double> read_array(const std::filesystem::path& dir, const std::string& name,
                                      std::uint64_t count, npy_dtype dtype,
                                      const manifest& listed) {
  std::vector<double> values(count);
  if (dtype == npy_dtype::float64) {
    read_listed(dir, name, count, dtype, listed, values.data());
  } else {
    std::vector<float> raw(count);
    read_listed(dir, name, count, dtype, listed, raw.data());
    std::copy(raw.begin(), raw.end(), values.begin());
  }
  return values;
}

/// read_array of an optimiser array: empty before the optimiser's first step (and without
/// momentum), else `count` elements.
inline std::vector<double> read_optimiser_array(const std::filesystem::path& dir,
                                                const std::string& name, std::uint64_t count,
                                                npy_dtype dtype, const manifest& listed) {
  const npy_header header = read_npy_header(dir / name);
  const bool empty = header.shape.size() == 1 && header.shape[0] == 0;
  return read_array(dir, name, empty ? 0 : count, dtype, listed);
}

/// write_checkpoint with the row tables `tables` (every rank's rows, gathered).
template <class Model, class Optimiser, class T = typename Model::scalar>
void write(const std::filesystem::path& dir, Model& model, Optimiser& optimiser,
           const train_result& progress, const nlohmann::json& settings,
           const std::vector<const row_table<T>*>& tables) {
  const auto& store = model.parameters();
  auto opt = optimiser_state(optimiser);
  replace_directory(dir, checkpoint_kind, [&](directory_writer& to) {
    nlohmann::json meta{{"format", checkpoint_kind.format},
                        {"format_version", checkpoint_version},
                        {"scalar", npy_dtype_name(dtype_of<T>())},
                        {"settings", settings},
                        {"progress", progress_json(progress)}};
    nlohmann::json parameters = nlohmann::json::array(), arrays = nlohmann::json::array();
    const auto write = [&](const std::string& name, npy_dtype dtype, std::size_t count,
                           const void* data) {
      const std::int64_t shape[1] = {static_cast<std::int64_t>(count)};
      to.add_file(name, [&](const std::filesystem::path& file) {
        return write_npy(file, dtype, shape, data);
      });
    };
    const std::vector<T> values = packed<T>(store, store.values());
    write("parameters.npy", dtype_of<T>(), values.size(), values.data());
    for (std::size_t p = 0; p < store.size(); ++p)
      parameters.push_back({{"name", store.shape(p).name}, {"rows", store.shape(p).rows},
                            {"cols", store.shape(p).cols}});
    for (const auto& [name, array] : opt.arrays) {
      const std::vector<T> flat =
          array->empty() ? std::vector<T>() : packed<T>(store, std::span<const T>(*array));
      write("optimiser-" + name + ".npy", dtype_of<T>(), flat.size(), flat.data());
      arrays.push_back(name);
    }
    std::vector<double> state;
    nlohmann::json sizes = nlohmann::json::array();
    for (const auto s : model.state()) {
      state.insert(state.end(), s.begin(), s.end());
      sizes.push_back(s.size());
    }
    write("state.npy", npy_dtype::float64, state.size(), state.data());
    nlohmann::json table_list = nlohmann::json::array();
    for (std::size_t k = 0; k < tables.size(); ++k) {
      const row_table<T>& t = *tables[k];
      const std::string prefix = message("table-", k, "-");
      write(prefix + "ids.npy", npy_dtype::int64, t.ids.size(), t.ids.data());
      write(prefix + "values.npy", dtype_of<T>(), static_cast<std::size_t>(t.values.size()),
            t.values.data());
      for (std::size_t a = 0; a < opt.arrays.size(); ++a) {
        const bool stepped = a < t.moments.size();
        write(prefix + opt.arrays[a].first + ".npy", dtype_of<T>(),
              stepped ? static_cast<std::size_t>(t.moments[a].size()) : 0,
              stepped ? t.moments[a].data() : nullptr);
      }
      table_list.push_back({{"name", t.shape.name}, {"first_id", t.shape.first_id},
                            {"end_id", t.shape.end_id}, {"cols", t.shape.cols},
                            {"rows", t.ids.size()}});
    }
    meta["parameters"] = parameters;
    meta["optimiser"] = {{"kind", opt.kind}, {"steps", *opt.steps}, {"arrays", arrays}};
    meta["state"] = sizes;
    meta["tables"] = table_list;
    to.write_metadata(std::move(meta));
  }, "sar::write_checkpoint");
}

/// Every rank's rows of each row table of `store` at rank `root`, ascending by id, with as
/// many optimiser arrays as the rank that holds the most, or none unless `with_moments`
/// (elsewhere: nothing). Collective; every rank passes the same `with_moments`.
template <communicator Comm, class T>
std::vector<row_table<T>> gather_tables(Comm& comm, const parameter_store<T>& store, int root,
                                        bool with_moments = true) {
  std::vector<row_table<T>> out;
  for (std::size_t k = 0; k < store.table_count(); ++k) {
    const row_table<T>& mine = store.table(k);
    std::int64_t arrays = with_moments ? static_cast<std::int64_t>(mine.moments.size()) : 0;
    if (with_moments) comm.all_reduce(std::span<std::int64_t>(&arrays, 1), reduce_op::max);
    const auto cols = mine.shape.cols;
    const auto rows = static_cast<std::size_t>(mine.ids.size());
    // To the root: the ids, then per row its values and each optimiser array's row.
    std::vector<std::vector<std::int64_t>> ids(static_cast<std::size_t>(comm.size()));
    std::vector<std::vector<T>> data(static_cast<std::size_t>(comm.size()));
    ids[static_cast<std::size_t>(root)] = mine.ids;
    auto& to_root = data[static_cast<std::size_t>(root)];
    for (std::size_t r = 0; r < rows; ++r) {
      const auto row = static_cast<Eigen::Index>(r);
      const T* values = mine.values.row(row).data();
      to_root.insert(to_root.end(), values, values + cols);
      for (std::int64_t a = 0; a < arrays; ++a) {
        if (static_cast<std::size_t>(a) < mine.moments.size())
          to_root.insert(to_root.end(), mine.moments[static_cast<std::size_t>(a)].row(row).data(),
                         mine.moments[static_cast<std::size_t>(a)].row(row).data() + cols);
        else
          to_root.insert(to_root.end(), static_cast<std::size_t>(cols), T(0));
      }
    }
    const auto all_ids = all_to_all_vectors(comm, ids);
    const auto all_data = all_to_all_vectors(comm, data);
    if (comm.rank() != root) continue;
    std::vector<std::pair<std::int64_t, const T*>> held;  // (id, its row of values and arrays)
    for (std::size_t q = 0; q < all_ids.size(); ++q)
      for (std::size_t r = 0; r < all_ids[q].size(); ++r)
        held.emplace_back(all_ids[q][r],
                          all_data[q].data() + r * static_cast<std::size_t>(cols * (1 + arrays)));
    std::sort(held.begin(), held.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    row_table<T>& t = out.emplace_back();
    t.shape = mine.shape;
    const auto n = static_cast<Eigen::Index>(held.size());
    t.values.resize(n, cols);
    t.moments.assign(static_cast<std::size_t>(arrays), matrix<T>(n, cols));
    for (Eigen::Index r = 0; r < n; ++r) {
      const auto& [id, from] = held[static_cast<std::size_t>(r)];
      t.ids.push_back(id);
      std::copy(from, from + cols, t.values.row(r).data());
      for (std::int64_t a = 0; a < arrays; ++a)
        std::copy(from + (a + 1) * cols, from + (a + 2) * cols,
                  t.moments[static_cast<std::size_t>(a)].row(r).data());
    }
  }
  return out;
}
}  // namespace detail::checkpoints

/// Writes the state of a training run (model parameters, row tables and state(), the
/// optimiser's state, `progress`, the caller's `settings`) as the checkpoint directory `dir`,
/// through sar::replace_directory: a checkpoint there is replaced only once the new one is
/// complete (a kill midway leaves the previous one), anything else that is not empty is
/// refused. The row tables as this process holds them. Not collective (see save_checkpoint).
/// Throws sar::io_error naming the path.
template <class Model, class Optimiser>
void write_checkpoint(const std::filesystem::path& dir, Model& model, Optimiser& optimiser,
                      const train_result& progress, const nlohmann::json& settings) {
  using T = typename Model::scalar;
  const auto& store = model.parameters();
  std::vector<const row_table<T>*> tables;
  for (std::size_t k = 0; k < store.table_count(); ++k) tables.push_back(&store.table(k));
  detail::checkpoints::write(dir, model, optimiser, progress, settings, tables);
}

/// write_checkpoint on rank `root` of comm, with every rank's rows of the row tables gathered
/// there, every rank returning or throwing alike (the others throw sar::comm_error naming the
/// root). Requires the model and optimiser state to be the same on every rank (as the training
/// loops keep them) and each table row held by one rank. Collective.
template <communicator Comm, class Model, class Optimiser>
void save_checkpoint(Comm& comm, const std::filesystem::path& dir, Model& model,
                     Optimiser& optimiser, const train_result& progress,
                     const nlohmann::json& settings, int root = 0) {
  const auto gathered = detail::checkpoints::gather_tables(comm, model.parameters(), root);
  std::exception_ptr failure;
  if (comm.rank() == root)
    detail::guarded(failure, [&] {
      std::vector<const row_table<typename Model::scalar>*> tables;
      for (const auto& t : gathered) tables.push_back(&t);
      detail::checkpoints::write(dir, model, optimiser, progress, settings, tables);
    });
  detail::agree_on_failure(comm, failure, "sar::save_checkpoint");
}

/// Reads and checks the checkpoint directory `dir`: its format and version, every field, every
/// array's type, size and CRC-32. Not collective (compare checkpoint::identity across ranks to
/// know they read the same). Throws sar::io_error naming the file and the problem.
inline checkpoint read_checkpoint(const std::filesystem::path& dir) {
  constexpr const char* where = "sar::read_checkpoint";
  namespace cp = detail::checkpoints;
  const auto meta_file = dir / "checkpoint.json";
  std::ifstream in(meta_file, std::ios::binary);
  SAR_CHECK(in.good(), io_error, where, ": cannot open ", meta_file.string(),
            " (not a checkpoint directory?)");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  checkpoint ck;
  ck.directory = dir;
  ck.identity = crc32_update(0, text.data(), text.size());
  const auto meta = nlohmann::json::parse(text, nullptr, false);
  SAR_CHECK(meta.is_object() && meta.contains("format") &&
                meta["format"] == checkpoint_kind.format,
            io_error, where, ": ", meta_file.string(), " is not a sar checkpoint's metadata");
  SAR_CHECK(meta.contains("format_version") &&
                (meta["format_version"] == 2 || meta["format_version"] == checkpoint_version),
            io_error, where, ": ", meta_file.string(), " has format version ",
            meta.value("format_version", nlohmann::json()).dump(), "; this sar reads versions 2 "
            "to ", checkpoint_version);
  check_metadata_seal(meta, meta_file.string(), where);
  std::uint64_t total = 0, state_total = 0;  // parameter values, layer state values
  std::vector<std::uint64_t> state_sizes;
  manifest checksums;
  try {
    const auto scalar = meta.at("scalar").get<std::string>();
    SAR_CHECK(scalar == "float32" || scalar == "float64", io_error, where, ": ",
              meta_file.string(), ": scalar '", scalar, "' (float32 or float64)");
    ck.scalar = scalar == "float32" ? npy_dtype::float32 : npy_dtype::float64;
    ck.settings = meta.at("settings");
    ck.progress = cp::progress_from(meta.at("progress"), meta_file.string());
    for (const auto& p : meta.at("parameters")) {
      checkpoint::parameter q{p.at("name").get<std::string>(), p.at("rows").get<std::int64_t>(),
                              p.at("cols").get<std::int64_t>()};
      constexpr std::int64_t limit = std::int64_t{1} << 31;
      SAR_CHECK(q.rows >= 0 && q.cols >= 0 && q.rows < limit && q.cols < limit, io_error, where,
                ": ", meta_file.string(), ": parameter '", q.name, "' has shape ", q.rows, " x ",
                q.cols);
      total += static_cast<std::uint64_t>(q.rows * q.cols);
      SAR_CHECK(total < (std::uint64_t{1} << 62), io_error, where, ": ", meta_file.string(),
                ": the parameters hold more than 2^62 values");
      ck.parameters.push_back(std::move(q));
    }
    const auto& opt = meta.at("optimiser");
    ck.optimiser_kind = opt.at("kind").get<std::string>();
    ck.optimiser_steps = opt.at("steps").get<std::uint64_t>();
    for (const auto& entry : opt.at("arrays")) {
      const auto name = entry.get<std::string>();
      const bool plain = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
      });
      SAR_CHECK(plain && std::none_of(ck.optimiser_arrays.begin(), ck.optimiser_arrays.end(),
                                      [&](const auto& a) { return a.first == name; }),
                io_error, where, ": ", meta_file.string(), ": optimiser array name '", name,
                "' (letters, digits, _; each once)");
      ck.optimiser_arrays.emplace_back(name, std::vector<double>());
    }
    for (const auto& size : meta.at("state")) {
      state_sizes.push_back(size.get<std::uint64_t>());
      state_total += state_sizes.back();
      constexpr std::uint64_t limit = std::uint64_t{1} << 40;
      SAR_CHECK(state_sizes.back() < limit && state_total < limit, io_error, where, ": ", meta_file.string(), ": layer state of ",
                state_sizes.back(), " values");
    }
    for (const auto& t : meta.value("tables", nlohmann::json::array())) {  // version 3
      checkpoint::table q{.name = t.at("name").get<std::string>(),
                          .first_id = t.at("first_id").get<std::int64_t>(),
                          .end_id = t.at("end_id").get<std::int64_t>(),
                          .cols = t.at("cols").get<std::int64_t>(),
                          .ids = {}, .values = {}, .arrays = {}};
      const auto rows = t.at("rows").get<std::int64_t>();
      SAR_CHECK(q.first_id >= 0 && q.first_id <= q.end_id && q.cols >= 1 &&
                    q.cols < (std::int64_t{1} << 31) && rows >= 0 && rows <= q.end_id - q.first_id,
                io_error, where, ": ", meta_file.string(), ": table '", q.name, "' of ", rows,
                " rows x ", q.cols, " for the ids [", q.first_id, ", ", q.end_id, ")");
      q.ids.resize(static_cast<std::size_t>(rows));  // sized now, read below
      ck.tables.push_back(std::move(q));
    }
    checksums =
        manifest::from_metadata(meta, meta_file.string(), checkpoint_kind.legacy_checksums);
    const train_result& r = ck.progress;
    for (int e = 0; e < r.epochs_done(); ++e)
      SAR_CHECK(r.history[static_cast<std::size_t>(e)].epoch == e, io_error, where, ": ",
                meta_file.string(), ": history entry ", e, " is epoch ",
                r.history[static_cast<std::size_t>(e)].epoch);
    SAR_CHECK(r.best_epoch >= -1 && r.best_epoch < r.epochs_done() && r.stale_evaluations >= 0,
              io_error, where, ": ", meta_file.string(), ": best epoch ", r.best_epoch,
              " or stale evaluations ", r.stale_evaluations, " outside the ",
              r.epochs_done(), " epochs of the history");
  } catch (const nlohmann::json::exception& e) {
    throw io_error(message(where, ": ", meta_file.string(), ": malformed: ", e.what()));
  }

  ck.values = cp::read_array(dir, "parameters.npy", total, ck.scalar, checksums);
  for (auto& [name, values] : ck.optimiser_arrays)
    values = cp::read_optimiser_array(dir, "optimiser-" + name + ".npy", total, ck.scalar,
                                      checksums);
  // Sizes checked against the file before anything of them is allocated.
  const std::vector<double> state =
      cp::read_array(dir, "state.npy", state_total, npy_dtype::float64, checksums);
  auto from = state.begin();
  for (const std::uint64_t size : state_sizes) {
    ck.state.emplace_back(from, from + static_cast<std::ptrdiff_t>(size));
    from += static_cast<std::ptrdiff_t>(size);
  }
  for (std::size_t k = 0; k < ck.tables.size(); ++k) {
    checkpoint::table& t = ck.tables[k];
    const std::string prefix = message("table-", k, "-");
    const auto rows = static_cast<std::int64_t>(t.ids.size());
    const auto values = static_cast<std::uint64_t>(rows * t.cols);
    cp::read_listed(dir, prefix + "ids.npy", static_cast<std::uint64_t>(rows), npy_dtype::int64,
                    checksums, t.ids.data());
    for (std::size_t r = 0; r < t.ids.size(); ++r)
      SAR_CHECK(t.ids[r] >= t.first_id && t.ids[r] < t.end_id &&
                    (r == 0 || t.ids[r - 1] < t.ids[r]),
                io_error, where, ": ", (dir / (prefix + "ids.npy")).string(), ": id ", t.ids[r],
                " at row ", r, " (ascending ids in [", t.first_id, ", ", t.end_id, ") expected)");
    t.values = cp::read_array(dir, prefix + "values.npy", values, ck.scalar, checksums);
    for (const auto& [name, unused] : ck.optimiser_arrays)
      t.arrays.push_back(
          cp::read_optimiser_array(dir, prefix + name + ".npy", values, ck.scalar, checksums));
  }
  return ck;
}

/// Puts the checkpoint's parameters, layer state and optimiser state into model and
/// optimiser, and into each row table the rows it holds (parameter_store::hold_rows first: the
/// rows of this rank's nodes). Checks everything first: throws sar::invalid_argument (naming
/// the first difference: a parameter's name or shape, the optimiser kind, a state size, a
/// table or a held row the checkpoint lacks) and leaves both untouched if the checkpoint does
/// not fit them. Bitwise the state written when the scalar types agree. Not collective.
template <class Model, class Optimiser>
void restore_checkpoint(const checkpoint& ck, Model& model, Optimiser& optimiser) {
  using T = typename Model::scalar;
  const std::string where = "sar::restore_checkpoint: " + ck.directory.string();
  auto& store = model.parameters();
  detail::checkpoints::check_fits(ck.parameters, ck.values.size(), ck.state, model, where);
  auto opt = optimiser_state(optimiser);
  SAR_CHECK(ck.optimiser_kind == opt.kind && ck.optimiser_arrays.size() == opt.arrays.size(),
            invalid_argument, where, " holds the state of optimiser '", ck.optimiser_kind,
            "', this run uses '", opt.kind, "'");
  for (std::size_t a = 0; a < opt.arrays.size(); ++a)
    SAR_CHECK(ck.optimiser_arrays[a].first == opt.arrays[a].first, invalid_argument, where,
              ": optimiser array ", a, " is '", ck.optimiser_arrays[a].first, "', expected '",
              opt.arrays[a].first, "'");
  const std::size_t values = ck.values.size();
  for (const auto& [name, saved] : ck.optimiser_arrays)
    SAR_CHECK(saved.empty() || saved.size() == values, invalid_argument, where,
              ": optimiser array '", name, "' holds ", saved.size(), " values, the model ",
              values);

  SAR_CHECK(ck.tables.size() == store.table_count(), invalid_argument, where, " holds ",
            ck.tables.size(), " row tables, the model ", store.table_count());
  // Everything that allocates first, then only copies and swaps (nothing left half done).
  std::vector<row_table<T>> tables;
  for (std::size_t k = 0; k < ck.tables.size(); ++k) {
    const checkpoint::table& saved = ck.tables[k];
    const row_table<T>& held = store.table(k);
    SAR_CHECK(saved.name == held.shape.name && saved.first_id == held.shape.first_id &&
                  saved.end_id == held.shape.end_id && saved.cols == held.shape.cols,
              invalid_argument, where, ": row table ", k, " is '", saved.name, "' (ids [",
              saved.first_id, ", ", saved.end_id, "), ", saved.cols, " columns), the model's '",
              held.shape.name, "' (ids [", held.shape.first_id, ", ", held.shape.end_id, "), ",
              held.shape.cols, ")");
    row_table<T>& t = tables.emplace_back(held);
    const bool stepped = !saved.arrays.empty() && !saved.arrays.front().empty();
    t.moments.assign(stepped ? saved.arrays.size() : 0,
                     matrix<T>(t.values.rows(), t.values.cols()));
    for (Eigen::Index r = 0; r < t.values.rows(); ++r) {
      const node_t id = t.ids[static_cast<std::size_t>(r)];
      const auto at = std::lower_bound(saved.ids.begin(), saved.ids.end(), id);
      SAR_CHECK(at != saved.ids.end() && *at == id, invalid_argument, where, ": row table '",
                saved.name, "' has no row of node ", id, " (", saved.ids.size(), " rows)");
      const auto from = static_cast<std::size_t>(at - saved.ids.begin()) *
                        static_cast<std::size_t>(saved.cols);
      for (Eigen::Index c = 0; c < t.values.cols(); ++c) {
        const auto i = from + static_cast<std::size_t>(c);
        t.values(r, c) = static_cast<T>(saved.values[i]);
        for (std::size_t a = 0; a < t.moments.size(); ++a)
          t.moments[a](r, c) = static_cast<T>(saved.arrays[a][i]);
      }
    }
  }
  std::vector<std::vector<T>> arrays;
  for (const auto& [name, saved] : ck.optimiser_arrays) {
    auto& array = arrays.emplace_back(
        saved.empty() ? 0 : static_cast<std::size_t>(store.total_size()), T(0));
    if (!saved.empty()) detail::checkpoints::unpack<T>(store, saved, array);
  }
  detail::checkpoints::put_into(model, ck.values, ck.state);
  *opt.steps = ck.optimiser_steps;
  for (std::size_t a = 0; a < opt.arrays.size(); ++a) opt.arrays[a].second->swap(arrays[a]);
  for (std::size_t k = 0; k < tables.size(); ++k) std::swap(store.table(k), tables[k]);
}

}  // namespace sar
