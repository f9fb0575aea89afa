// KernelOptions: values outside a switch's choices are refused, naming the flag.
#include <gtest/gtest.h>

#include "runtime/kernel_options.h"
#include "util/check.h"

using namespace vllm;

TEST(KernelOptions, ValuesOutsideTheChoicesAreErrorsNamingTheFlag) {
  const KernelOptions before = kernel_options();
  KernelOptions o;
  o.cpu_isa = "avx9";
  try {
    set_kernel_options(o);
    FAIL() << "--cpu-isa avx9 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--cpu-isa avx9"), std::string::npos) << e.what();
  }
  o = KernelOptions{};
  o.gemv_slices = 3;
  try {
    set_kernel_options(o);
    FAIL() << "--gemv-slices 3 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--gemv-slices 3"), std::string::npos) << e.what();
  }
  // A refused set leaves the options as they were.
  EXPECT_EQ(kernel_options().cpu_isa, before.cpu_isa);
  EXPECT_EQ(kernel_options().gemv_slices, before.gemv_slices);
}
