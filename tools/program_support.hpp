// What the command-line programs (sar-convert, sar-partition, sar-sample, sar-train) share:
// parsing the command line with sar's exit codes, the dataset-size options, loading a
// dataset with progress lines on stdout, what the program is doing (for an out-of-memory
// report), timing, the peak-memory line, and main()'s error report.
//
// Exit codes: 0 for success, --help and --version; 1 for every error (a bad option or
// environment variable, bad input, out of memory), with one line "<program>: <problem>" on
// stderr. Never an uncaught exception or a signal.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cctype>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <sys/resource.h>

#include "sar/core/memory.hpp"
#include "sar/graph/io/load.hpp"
#include "settings.hpp"

namespace sar_programs {

using clock_type = std::chrono::steady_clock;

/// Seconds elapsed since `start`.
inline double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

/// What the program is doing now ("loading cora", "training"), named by an out-of-memory
/// report. Set it at the start of each long phase.
inline std::string& current_phase() {
  static std::string phase = "starting";
  return phase;
}

/// "out of memory while <phase> (peak resident memory <N>; <M> available)": what a program
/// says for a std::bad_alloc, whose own what() names nothing.
inline std::string out_of_memory_message() {
  return sar::message("out of memory while ", current_phase(), " (peak resident memory ",
                      sar::format_bytes(static_cast<double>(sar::peak_memory_bytes())), "; ",
                      sar::format_bytes(static_cast<double>(sar::available_memory_bytes())),
                      " available)");
}

/// Adds an option whose value, one of `names`, is parsed straight into `value` (an Enum, or a
/// std::optional<Enum> that stays empty without the option); an Enum's default is shown as its
/// name, and another name is refused as CLI::IsMember refuses it (the names listed).
template <class Enum, class Target>
CLI::Option* add_choice(CLI::App& app, const std::string& flag, Target& value,
                        const choices<Enum>& names, const std::string& help) {
  std::vector<std::string> keys;
  for (const auto& n : names) keys.push_back(n.first);
  CLI::Option* option = app.add_option_function<std::string>(
                               flag, [&value, names](const std::string& name) {
                                 for (const auto& n : names)
                                   if (n.first == name) value = n.second;
                               },
                               help)
                            ->check(CLI::IsMember(keys));
  if constexpr (std::is_same_v<Target, Enum>) option->default_str(name_of(names, value));
  return option;
}

/// CLI11 check: the value parses as a finite number (CLI::Range lets NaN through).
inline const CLI::Validator finite_number(
    [](std::string& text) {
      try {
        return std::isfinite(std::stod(text)) ? std::string() : "must be a finite number";
      } catch (const std::exception&) {
        return std::string();  // not a number: the option's own conversion reports it
      }
    },
    "FINITE");

/// A CLI11 check that the value is a finite number for which ok(value) holds; its message
/// names the value and `requirement` ("'abc' is not a number", "'inf' is not a finite number",
/// "'-5' is not above 0").
template <class Ok>
CLI::Validator number_check(Ok ok, const std::string& requirement, const std::string& name) {
  return CLI::Validator(
      [ok, requirement](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (text.empty() || end == text.c_str() || *end != '\0')
          return "'" + text + "' is not a number";
        if (!std::isfinite(value)) return "'" + text + "' is not a finite number";
        return ok(value) ? std::string() : "'" + text + "' " + requirement;
      },
      name);
}

/// CLI11 check: a finite number from `low` to `high`.
inline CLI::Validator number_in(double low, double high) {
  return number_check([low, high](double v) { return v >= low && v <= high; },
                      sar::message("is not from ", low, " to ", high), "");
}

/// CLI11 check: a number above 0.
inline const CLI::Validator positive =
    number_check([](double v) { return v > 0; }, "is not above 0", "POSITIVE");
/// CLI11 check: a number of at least 0.
inline const CLI::Validator non_negative =
    number_check([](double v) { return v >= 0; }, "is not 0 or above", "NON-NEGATIVE");

/// The most worker threads a program's --threads accepts (more would only reserve memory for
/// idle slots).
inline constexpr int max_threads = 4096;
/// CLI11 check of --threads: from 0 (all cores) to max_threads.
inline const CLI::Validator thread_count = CLI::Range(0, max_threads);

/// A number of bytes written as an integer with an optional binary suffix K, M, G or T (KiB,
/// MiB, ...; "KiB" and "KB" read as K), e.g. 16G; nullopt for anything else or above 2^62.
inline std::optional<std::uint64_t> parse_byte_size(std::string text) {
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 18) return std::nullopt;
  const std::uint64_t value = std::stoull(text.substr(0, digits));
  std::string unit = text.substr(digits);
  for (const char* tail : {"iB", "B"})
    if (unit.size() > 1 && unit.ends_with(tail)) {
      unit.resize(unit.size() - std::string_view(tail).size());
      break;
    }
  int shift = 0;
  if (unit == "K" || unit == "k") shift = 10;
  else if (unit == "M") shift = 20;
  else if (unit == "G") shift = 30;
  else if (unit == "T") shift = 40;
  else if (!unit.empty() && unit != "B") return std::nullopt;
  if (value > (std::uint64_t{1} << (62 - shift))) return std::nullopt;
  return value << shift;
}

/// CLI11 check: a byte size parse_byte_size reads.
inline const CLI::Validator byte_size(
    [](std::string& text) {
      return parse_byte_size(text) ? std::string()
                                   : "'" + text + "' is not a size in bytes (e.g. 4096, 512M, 16G)";
    },
    "BYTES");

/// Adds option `name` whose value is a byte size (parse_byte_size: 4096, 512M, 16G) into
/// `target`, checked.
inline CLI::Option* add_byte_size_option(CLI::App& app, const std::string& name,
                                         std::uint64_t& target, const std::string& help) {
  return app
      .add_option_function<std::string>(
          name, [&target](const std::string& text) { target = *parse_byte_size(text); }, help)
      ->check(byte_size);
}

/// CLI11 check: the value is not empty (a path or spec).
inline const CLI::Validator not_empty(
    [](std::string& text) { return text.empty() ? "must not be empty" : std::string(); }, "");

/// `status`, or 1 after "<program>: cannot write standard output: <reason>" on stderr if what
/// the program printed there could not all be written (a full disk, a closed pipe): a run
/// whose output was lost does not end in success. Flushes stdout.
inline int checked_stdout(const std::string& program, int status) {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  if (flushed && !std::ferror(stdout)) return status;
  std::fprintf(stderr, "%s: cannot write standard output: %s\n", program.c_str(),
               !flushed && errno != 0 ? std::strerror(errno) : "an earlier write failed");
  return 1;
}

/// The smallest file size limit (ulimit -f) a program that starts MPI runs under: Open MPI's
/// start-up writes files of a few MiB (its shared-memory store) and fails below about 5 MiB,
/// naming no limit.
inline constexpr std::uint64_t mpi_file_size_floor = 16u << 20;

/// Call first in main. Ignores SIGXFSZ, so a write past the file size limit fails with EFBIG
/// and is reported naming its file, instead of killing the process. For a program that starts
/// MPI (`starts_mpi`), returns exit status 1 after "<program>: the file size limit (ulimit -f)
/// is ..." on stderr when the limit is below mpi_file_size_floor; nullopt to go on.
inline std::optional<int> check_file_size_limit(const char* program, bool starts_mpi) {
  std::signal(SIGXFSZ, SIG_IGN);
  rlimit limit{};
  if (!starts_mpi || ::getrlimit(RLIMIT_FSIZE, &limit) != 0 ||
      limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= mpi_file_size_floor)
    return std::nullopt;
  std::fprintf(stderr, "%s: the file size limit (ulimit -f) is %llu KiB; MPI's start-up writes "
               "files of a few MiB and %s writes its outputs: raise it to at least %llu KiB "
               "(ulimit -f %llu) or to unlimited\n", program,
               static_cast<unsigned long long>(limit.rlim_cur / 1024), program,
               static_cast<unsigned long long>(mpi_file_size_floor / 1024),
               static_cast<unsigned long long>(mpi_file_size_floor / 1024));
  return 1;
}

/// The program's arguments (argv[1] on) joined by spaces: what check_same_on_every_rank
/// compares, so ranks started with different settings are refused.
inline std::string arguments_of(int argc, char** argv) {
  std::string out;
  for (int k = 1; k < argc; ++k) out.append(k > 1 ? " " : "").append(argv[k]);
  return out;
}

/// Parses the command line into the variables of `app` (named after the program). Returns
/// nullopt to go on, or the exit status to end with at once: 0 after --help or --version
/// (printed on stdout), 1 after any parse or validation error (printed on stderr as
/// "<program>: <problem>" and a hint to --help; never CLI11's own exit codes).
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success))
      return checked_stdout(app.get_name(), app.exit(e));
    std::fprintf(stderr, "%s: %s\nRun %s --help for the options.\n", app.get_name().c_str(),
                 e.what(), app.get_name().c_str());
    return 1;
  }
}

/// Adds --num-nodes and --num-classes, which state the sizes of a dataset read from files
/// (sar::dataset_sizes: without them a mostly empty node-id or class range is refused).
inline void add_dataset_size_options(CLI::App& app, sar::dataset_sizes& sizes) {
  app.add_option("--num-nodes", sizes.num_nodes,
                 "state the node count of a dataset read from files: an edge list gets this "
                 "many nodes (an id beyond is an error); other formats must declare it. Needed "
                 "to accept an id range that is mostly unused (fewer than half the ids in any "
                 "edge)")
      ->check(positive);
  app.add_option("--num-classes", sizes.num_classes,
                 "state the class count of a dataset read from files (a label beyond it is an "
                 "error). Needed to accept a class range that is mostly empty (fewer than half "
                 "the classes with a node)")
      ->check(positive);
}

/// The names of the tasks of `level` (sar::task_table), for --task's check.
inline std::vector<std::string> task_names(sar::task_level level = sar::task_level::node) {
  std::vector<std::string> names;
  for (const sar::task_facts& t : sar::task_table)
    if (t.level == level) names.emplace_back(t.name);
  return names;
}

/// Adds --task, which says what the nodes of a dataset read from files are to predict
/// (sar::dataset_sizes::task): classify, regress or multilabel.
inline void add_task_option(CLI::App& app, sar::dataset_sizes& sizes) {
  app.add_option_function<std::string>(
         "--task", [&sizes](const std::string& name) { sizes.task = sar::parse_task(name); },
         "what the nodes are to predict: classify (one class per node: an OGB directory's "
         "raw/node-label), regress (rows of floats: raw/node-target) or multilabel (rows of 0/1: "
         "a multi-column raw/node-label). Default: what a .npy dataset or partition store "
         "declares, else classify")
      ->check(CLI::IsMember(task_names()));
}

/// "7 classes", "1 regression target", "112 labels (multi-label)": what a model of `task`
/// with `outputs` outputs predicts.
inline std::string outputs_summary(sar::task_kind task, std::int64_t outputs) {
  const sar::task_facts& facts = sar::facts_of(task);
  return sar::message(outputs, " ", outputs == 1 ? facts.output : facts.outputs);
}

/// The sparse_below of sar::load_dataset for a --sparse-features setting: off 0 (dense), on 1
/// (always sparse), auto sar::sparse_features_density.
inline double sparse_below(switch_setting setting) {
  return setting == switch_setting::off  ? 0.0
         : setting == switch_setting::on ? 1.0
                                         : sar::sparse_features_density;
}

/// Whether --sparse-features `setting` keeps features with `non_zeros` of `entries` entries
/// non-zero as sparse rows: on, or auto at most sar::sparse_features_density of them.
inline bool wants_sparse(switch_setting setting, double non_zeros, double entries) {
  return entries > 0 &&
         (setting == switch_setting::on ||
          (setting == switch_setting::automatic &&
           non_zeros <= sar::sparse_features_density * entries));
}

/// Holds the features of `holder` (a graph_dataset or graph_part: `rows` of them) as sparse
/// rows when `sparse`, else dense, converting them if they are held the other way.
template <class Holder>
void hold_features(Holder& holder, bool sparse, Eigen::Index rows) {
  if (sparse && !holder.sparse()) {
    holder.sparse_features = sar::to_sparse_rows<float, float>(holder.features);
    holder.features.resize(rows, 0);
  } else if (!sparse && holder.sparse()) {
    holder.features = sar::to_dense<float>(holder.sparse_features);
    holder.sparse_features = {};
  }
}

/// Turns the dense features of `data` into sparse rows where wants_sparse (a dataset read
/// with sparse_below(setting) holds sparse features only where it does).
inline void make_sparse_if_wanted(sar::graph_dataset& data, switch_setting setting) {
  if (!data.sparse())
    hold_features(data,
                  wants_sparse(setting, static_cast<double>((data.features.array() != 0.0f).count()),
                               static_cast<double>(data.features.size())),
                  data.num_nodes());
}

/// Adds --sparse-features auto | on | off (`setting`), for a program that writes `what`.
inline void add_sparse_features_option(CLI::App& app, switch_setting& setting,
                                        const char* what) {
  add_choice(app, "--sparse-features", setting, switch_names,
             sar::message("write the features as a sparse matrix in ", what, " (compressed "
                          "rows; sar-train reads them so): auto (if at most 5% are "
                          "non-zero) | on | off"));
}

/// sar::load_dataset(spec, sizes, sparse_below), printing "loading <spec> ..." before and a
/// one-line summary of the dataset with the time taken after; sets the phase. Throws what
/// load_dataset throws.
inline sar::graph_dataset load_dataset_reporting(const std::string& spec,
                                                 const sar::dataset_sizes& sizes,
                                                 double sparse_below = 0) {
  const auto start = clock_type::now();
  current_phase() = "loading " + spec;
  std::printf("loading %s ...\n", spec.c_str());
  std::fflush(stdout);
  sar::graph_dataset data = sar::load_dataset(spec, sizes, sparse_below);
  std::printf("loaded %s: %lld nodes, %lld edges, %lld %s, %s, %lld train nodes (%.2f s)\n",
              data.name.c_str(), static_cast<long long>(data.num_nodes()),
              static_cast<long long>(data.graph.num_edges()),
              static_cast<long long>(data.feature_dim()),
              data.sparse() ? "sparse features" : "features",
              outputs_summary(data.task, data.num_outputs()).c_str(),
              static_cast<long long>(data.count(sar::node_split::train)), seconds_since(start));
  return data;
}

/// Throws sar::invalid_argument naming the first non-finite feature (row, column, value) of
/// `where` ("sar-train: <dataset>").
inline void check_finite_features(const sar::matrixf& features, const std::string& where) {
  for (Eigen::Index i = 0; i < features.rows(); ++i)
    for (Eigen::Index j = 0; j < features.cols(); ++j)
      SAR_CHECK(std::isfinite(features(i, j)), sar::invalid_argument, where, ": feature row ", i,
                " column ", j, " is ", features(i, j), " (a model needs finite features)");
}

/// Divides every feature row by the sum of its absolute values, summed in double (the GCN
/// paper's preprocessing for non-negative features; sar-train --normalise-features): finite
/// features give entries in [-1, 1], whatever their magnitude; zero rows stay zero.
inline void row_normalise(sar::matrixf& features) {
  for (Eigen::Index i = 0; i < features.rows(); ++i) {
    const double sum = features.row(i).cast<double>().cwiseAbs().sum();
    if (sum != 0)
      for (Eigen::Index j = 0; j < features.cols(); ++j)
        features(i, j) = static_cast<float>(features(i, j) / sum);
  }
}

/// The smallest feature value (0 for no features; sparse: of the stored values, or 0).
inline float smallest_feature(const sar::matrixf& features) {
  return features.size() > 0 ? features.minCoeff() : 0.0f;
}
/// See smallest_feature (dense).
inline float smallest_feature(const sar::sparse_rows<float>& features) {
  const auto& v = features.values;
  return v.empty() ? 0.0f : *std::min_element(v.begin(), v.end());
}

/// check_finite_features of sparse features (their stored values).
inline void check_finite_features(const sar::sparse_rows<float>& features,
                                  const std::string& where) {
  for (Eigen::Index i = 0; i < features.rows(); ++i)
    for (sar::edge_t k = features.offsets[i]; k < features.offsets[i + 1]; ++k)
      SAR_CHECK(std::isfinite(features.values[k]), sar::invalid_argument, where, ": feature row ",
                i, " column ", features.columns[k], " is ", features.values[k],
                " (a model needs finite features)");
}

/// row_normalise of sparse features (a row's zeros add nothing to its sum).
inline void row_normalise(sar::sparse_rows<float>& features) {
  for (Eigen::Index i = 0; i < features.rows(); ++i) {
    double sum = 0;
    for (sar::edge_t k = features.offsets[i]; k < features.offsets[i + 1]; ++k)
      sum += std::abs(static_cast<double>(features.values[k]));
    if (sum != 0)
      for (sar::edge_t k = features.offsets[i]; k < features.offsets[i + 1]; ++k)
        features.values[k] = static_cast<float>(features.values[k] / sum);
  }
}

/// Prints "peak memory <MiB> MiB" (the process's peak resident set) on stdout.
inline void print_peak_memory() {
  std::printf("peak memory %.1f MiB\n",
              static_cast<double>(sar::peak_memory_bytes()) / (1024.0 * 1024.0));
}

/// Returns checked_stdout(run(argc, argv)); an exception escaping it is printed as
/// "<program>: <what>" (a std::bad_alloc as out_of_memory_message()) on stderr, after flushing
/// stdout, and gives exit status 1.
inline int run_reporting_errors(const char* program, int (*run)(int, char**), int argc,
                                char** argv) {
  check_file_size_limit(program, false);
  try {
    return checked_stdout(program, run(argc, argv));
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", program, out_of_memory_message().c_str());
  } catch (const std::exception& e) {
    std::fflush(stdout);
    // A message that names the program already is not prefixed twice.
    const std::string text = e.what(), own = std::string(program) + ": ";
    std::fprintf(stderr, "%s%s\n", text.starts_with(own) ? "" : own.c_str(), text.c_str());
  }
  return 1;
}

}  // namespace sar_programs
