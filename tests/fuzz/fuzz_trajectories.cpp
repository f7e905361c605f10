// libFuzzer target: the trajectory dataset reader (DeepMind's layout with .npy fields). A
// valid dataset (two generated wave trajectories of 3 steps, one with a static input field) is
// written once; each input replaces one of its files (meta.json or a field's .npy, chosen by
// the first byte) with the remaining bytes while read_trajectory_dataset runs.
#include "sar/graph/io/trajectories.hpp"
#include "sar/graph/wave_trajectories.hpp"
#include "fuzz_support.hpp"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fs::path written = [] {
    sar::wave_dataset_options o;
    o.trajectory.cells_across = 4;
    o.trajectory.steps = 3;
    o.train = 1;
    o.valid = 0;
    o.test = 1;
    sar::trajectory_dataset d = sar::make_wave_dataset(o);
    d.fields.static_inputs = {"speed"};
    d.fields.static_widths = {1};
    for (auto* split : {&d.train, &d.test})
      for (sar::trajectory& t : *split) t.static_inputs = sar::matrixf::Ones(t.num_nodes(), 1);
    const fs::path dir = sar_fuzz::scratch() / "waves";
    sar::write_trajectory_dataset(dir, d);
    return dir;
  }();
  static sar_fuzz::mutable_directory files(written);
  files.with_input(data, size, [&] {
    sar_fuzz::expect_clear_errors([&] { (void)sar::read_trajectory_dataset(written); });
  });
  return 0;
}
