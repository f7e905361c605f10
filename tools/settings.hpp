// The programs' enum-valued settings and the names their options and outputs give them
// (program_support.hpp's add_choice parses an option straight into one). No CLI11 here: the
// heavy translation units of sar-train read settings without compiling the parser.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/sampling/samplers.hpp"

namespace sar_programs {

/// The names of an enum option's values, in --help's order: {{"on", on}, ...}.
template <class Enum>
using choices = std::vector<std::pair<std::string, Enum>>;

/// The name `value` has in `names` (each value of the enum must have one).
template <class Enum>
const std::string& name_of(const choices<Enum>& names, Enum value) {
  const auto at = std::find_if(names.begin(), names.end(),
                               [&](const auto& n) { return n.second == value; });
  SAR_CHECK(at != names.end(), sar::error, "internal: an option value without a name");
  return at->first;
}

/// A setting that is on, off, or left to the program (auto).
enum class switch_setting { automatic, on, off };
/// Its names.
inline const choices<switch_setting> switch_names{
    {"auto", switch_setting::automatic}, {"on", switch_setting::on}, {"off", switch_setting::off}};

/// --precision's values (sar-train, sar-plan): the type of values and parameters.
enum class precision { single, twice };
/// Their names.
inline const choices<precision> precision_names{{"float", precision::single},
                                                {"double", precision::twice}};

/// --storage's values (sar-train, sar-plan): how dense input features are held.
enum class feature_storage { fp32, bf16 };
/// Their names.
inline const choices<feature_storage> storage_names{{"fp32", feature_storage::fp32},
                                                    {"bf16", feature_storage::bf16}};

/// --sampler's values (sar-train, sar-sample).
inline const choices<sar::sampler_kind> sampler_names{{"sage", sar::sampler_kind::node_wise},
                                                      {"ladies", sar::sampler_kind::layer_wise}};

/// --negative-sampler's values (sar-train --task link): where negative destinations come from.
enum class negative_sampler { uniform, degree };
/// Their names.
inline const choices<negative_sampler> negative_sampler_names{
    {"uniform", negative_sampler::uniform}, {"degree", negative_sampler::degree}};

/// --schedule's values (sar-train, sar-plan): the distributed schedules by their names in
/// sar::named_exchange.
enum class schedule_kind { sequential, keep_halo, one_shot };
/// Their names.
inline const choices<schedule_kind> schedule_names{{"sequential", schedule_kind::sequential},
                                                   {"keep_halo", schedule_kind::keep_halo},
                                                   {"one_shot", schedule_kind::one_shot}};

}  // namespace sar_programs
