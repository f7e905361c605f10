// sar::spill_directory: the run's own directory, its files, its removal at the end, and what a
// run killed with SIGKILL left, removed by the next run (and nothing sar cannot prove it wrote).
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "sar/io/spill_directory.hpp"
#include "test_support.hpp"

using namespace sar;
namespace fs = std::filesystem;

TEST_CASE("spill_directory: files written and read back, errors named, removed at the end") {
  testing_support::temp_dir tmp("spill");
  const fs::path parent = tmp.path / "spill";  // created by the spill directory
  std::ofstream(tmp.path / "keep.txt") << "not sar's";
  fs::path made;
  {
    spill_directory spill(parent);
    made = spill.path();
    CHECK(made.parent_path() == parent);
    CHECK(made.filename().string().starts_with("sar-spill-"));
    const std::vector<double> rows{1.5, -2, 3e10};
    spill.write("layer1.part0", std::as_bytes(std::span(rows)));
    std::vector<double> back(3);
    spill.read("layer1.part0", std::as_writable_bytes(std::span(back)));
    CHECK(back == rows);
    spill.write("layer1.part0", std::as_bytes(std::span(rows).first(1)));  // replaced
    CHECK_THROWS_WITH_AS(spill.read("layer1.part0", std::as_writable_bytes(std::span(back))),
                         doctest::Contains("holds 8 bytes, 24 expected"), io_error);
    CHECK_THROWS_WITH_AS(spill.read("never", std::as_writable_bytes(std::span(back))),
                         doctest::Contains("never"), io_error);
    CHECK_THROWS_AS(spill.write("../escape", {}), invalid_argument);
    std::ofstream(tmp.path / "target.txt") << "a user's";
    fs::create_symlink(tmp.path / "target.txt", made / "link");  // planted: not followed
    CHECK_THROWS_WITH_AS(spill.write("link", std::as_bytes(std::span(rows))),
                         doctest::Contains("link"), io_error);
    std::ifstream target(tmp.path / "target.txt");
    std::string kept;
    std::getline(target, kept);
    CHECK(kept == "a user's");
    CHECK_THROWS_AS(spill.write(".sar-journal", {}), invalid_argument);
    CHECK_THROWS_WITH_AS(spill.require_free(std::uint64_t{1} << 62, "the test's rows"),
                         doctest::Contains(parent.string().c_str()), io_error);
    spill.require_free(1, "one byte");
  }
  CHECK_FALSE(fs::exists(made));
  CHECK(fs::is_empty(parent));
  CHECK(fs::exists(tmp.path / "keep.txt"));
  CHECK(fs::exists(tmp.path / "target.txt"));
  CHECK_THROWS_WITH_AS(spill_directory(tmp.path / "keep.txt"),
                       doctest::Contains("is not a directory"), io_error);
}

TEST_CASE("spill_directory: what a killed run left goes with the next run, nothing else") {
  testing_support::temp_dir tmp("spill-killed");
  const fs::path parent = tmp.path;
  // A run killed (SIGKILL) after spilling: a child process of this test.
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    spill_directory spill(parent);
    const std::vector<float> rows(1000, 2.5f);
    spill.write("layer0.part3", std::as_bytes(std::span(rows)));
    const char done = 1;
    if (::write(ready[1], &done, 1) != 1) ::_exit(1);
    ::pause();  // killed here
    ::_exit(0);
  }
  char done = 0;
  REQUIRE(::read(ready[0], &done, 1) == 1);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);
  std::vector<fs::path> left;
  for (const auto& entry : fs::directory_iterator(parent)) left.push_back(entry.path());
  REQUIRE(left.size() == 1);  // the killed run's directory
  // Look-alikes sar cannot prove it wrote: a dead run's directory holding a file its journal
  // does not name, another host's, and one of a process that still runs (this one).
  const std::string dead_pid = std::to_string(child);
  const auto look_alike = [&](const std::string& host, const std::string& pid,
                              const std::string& token, bool foreign_file) {
    const fs::path dir = parent / ("sar-spill-" + host + "-" + pid + "-" + token);
    fs::create_directory(dir);
    std::ofstream(dir / ".sar-journal") << nlohmann::json{{"token", token}}.dump()
                                        << "\nf layer0.part1\n";
    std::ofstream(dir / "layer0.part1") << "spilled";
    if (foreign_file) std::ofstream(dir / "yours.txt") << "a user's";
    return dir;
  };
  const std::string host = detail::host_name();
  const fs::path unproven = look_alike(host, dead_pid, "00000000000000bb", true);
  const fs::path elsewhere = look_alike("elsewhere.example", dead_pid, "00000000000000cc", false);
  const fs::path running =
      look_alike(host, std::to_string(::getpid()), "00000000000000dd", false);
  {
    spill_directory next(parent);
    CHECK_FALSE(fs::exists(left.front()));
    CHECK(fs::exists(unproven / "yours.txt"));
    CHECK(fs::exists(elsewhere / "layer0.part1"));
    CHECK(fs::exists(running / "layer0.part1"));
  }
}
