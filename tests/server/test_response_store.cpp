// The Responses API store: exact eviction order under the count bound and the byte bound, and
// an entry larger than the byte cap not kept.
#include <gtest/gtest.h>

#include "server/response_store.h"

namespace vllm::server {
namespace {

StoredResponse entry(const std::string& text) {
  return {ojson{{"t", text}}, ojson::array()};
}

// Bytes the store counts for entry(text): {"t":"<text>"} and [].
size_t bytes_of(const std::string& text) { return text.size() + 8 + 2; }

TEST(ResponseStore, EvictsOldestPastTheCount) {
  ResponseStore store(2, 1 << 20);
  ASSERT_TRUE(store.put("a", entry("1")));
  ASSERT_TRUE(store.put("b", entry("2")));
  ASSERT_TRUE(store.put("c", entry("3")));
  EXPECT_FALSE(store.get("a"));
  EXPECT_EQ(store.get("b")->response["t"], "2");
  EXPECT_EQ(store.get("c")->response["t"], "3");
  EXPECT_EQ(store.size(), 2u);
}

TEST(ResponseStore, EvictsOldestPastTheBytes) {
  const std::string ten(10, 'x');
  ResponseStore store(100, 2 * bytes_of(ten));
  ASSERT_TRUE(store.put("a", entry(ten)));
  ASSERT_TRUE(store.put("b", entry(ten)));
  EXPECT_EQ(store.size(), 2u);
  ASSERT_TRUE(store.put("c", entry(ten + "y")));  // one byte more: a and b cannot both stay
  EXPECT_FALSE(store.get("a"));
  EXPECT_FALSE(store.get("b"));
  EXPECT_TRUE(store.get("c"));
}

TEST(ResponseStore, TooLargeAloneIsNotKeptAndEvictsNothing) {
  ResponseStore store(100, 40);
  ASSERT_TRUE(store.put("a", entry("small")));
  EXPECT_FALSE(store.put("big", entry(std::string(64, 'z'))));
  EXPECT_FALSE(store.get("big"));
  EXPECT_TRUE(store.get("a"));
}

TEST(ResponseStore, ZeroCountKeepsNothing) {
  ResponseStore store(0, 1 << 20);
  EXPECT_FALSE(store.put("a", entry("1")));
  EXPECT_EQ(store.size(), 0u);
}

}  // namespace
}  // namespace vllm::server
