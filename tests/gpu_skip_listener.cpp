// doctest only counts the cases a decorator skipped; this listener says which, and why ("skipped: no GPU"). Linked
// into every test binary with GPU cases (test_kernels, test_cuda). ctest never lists a skipped case, so the
// "gpu:" ctest entries (tests/run_gpu_cases.sh) report the GPU cases as Skipped rather than passed.
#include "kernels/device.hpp"

#include <doctest/doctest.h>

#include <ostream>

namespace {

struct gpu_skip_listener : doctest::IReporter {
  explicit gpu_skip_listener(const doctest::ContextOptions& opt) : out(*opt.cout) {}

  void test_case_skipped(const doctest::TestCaseData& tc) override {
    if (tc.m_skip && actorllm::visible_gpu_count() == 0)
      out << "[doctest] skipped: no GPU (" << actorllm::gpu_unavailable_reason() << "): " << tc.m_name << "\n";
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
