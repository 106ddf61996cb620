// doctest only counts the cases a decorator skipped; this listener says which, and why ("skipped: no GPU", or
// "skipped: needs 2 GPUs" for a case named "... (2 GPUs) ..." on a machine with fewer). Linked
// into every test binary with GPU cases (test_kernels, test_cuda). ctest never lists a skipped case, so the
// "gpu:" ctest entries (tests/run_gpu_cases.sh) report the GPU cases as Skipped rather than passed.
#include "kernels/device.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <ostream>
#include <string>

namespace {

struct gpu_skip_listener : doctest::IReporter {
  explicit gpu_skip_listener(const doctest::ContextOptions& opt) : out(*opt.cout) {}

  void test_case_skipped(const doctest::TestCaseData& tc) override {
    if (!tc.m_skip)
      return;
    const int gpus = actorllm::visible_gpu_count();
    if (gpus == 0) {
      out << "[doctest] skipped: no GPU (" << actorllm::gpu_unavailable_reason() << "): " << tc.m_name << "\n";
      return;
    }
    // A case that needs several GPUs says so in its name: "(2 GPUs)".
    const std::string name = tc.m_name;
    const auto open = name.find('(');
    const auto tag = name.find(" GPUs)", open == std::string::npos ? 0 : open);
    if (open != std::string::npos && tag != std::string::npos && tag > open + 1) {
      const int needed = std::atoi(name.substr(open + 1, tag - open - 1).c_str());
      if (needed > gpus)
        out << "[doctest] skipped: needs " << needed << " GPUs (" << gpus << " visible): " << tc.m_name << "\n";
    }
  }
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}

  std::ostream& out;
};

REGISTER_LISTENER("gpu_skip", 1, gpu_skip_listener);

}  // namespace
