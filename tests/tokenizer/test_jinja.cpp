#include <gtest/gtest.h>
#include "tokenizer/chat_template.h"
TEST(Jinja, Smoke) { EXPECT_EQ(vllm::ChatTemplate::parse("{{ 1 + 2 }}").render({{"x", 1}}), "3"); }
