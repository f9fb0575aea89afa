// Reasoning parsers (--reasoning-parser): model output -> (reasoning, content) around think
// tags, whole or delta by delta, as vLLM's deepseek_r1 and qwen3 parsers split them. Text-based:
// a tag cut across deltas is held back until it is whole, so streamed deltas add up to the
// non-streaming split.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vllm::server {

struct ReasoningSplit {
  std::optional<std::string> reasoning;
  std::optional<std::string> content;
  bool ended = false;  // the reasoning is over (end tag, implicit end, or none expected)
};

class ReasoningParser {
 public:
  // deepseek_r1 or qwen3 (else vllm::Error). `thinking_enabled`: chat_template_kwargs'
  // enable_thinking (qwen3 then reads everything as content).
  static std::unique_ptr<ReasoningParser> make(const std::string& name, bool thinking_enabled);
  static const std::vector<std::string>& names();

  const std::string& start_tag() const { return start_; }
  const std::string& end_tag() const { return end_; }
  // True when no reasoning is expected at all (qwen3 with enable_thinking false).
  bool disabled() const { return disabled_; }
  ReasoningSplit split(std::string_view text) const;

 private:
  ReasoningParser(std::string name, bool thinking_enabled);
  friend class ReasoningStream;
  // The split of a prefix, reporting only what later text cannot change.
  ReasoningSplit scan(std::string_view text, bool final) const;
  std::string name_;
  std::string start_ = "<think>", end_ = "</think>";
  bool disabled_ = false;
};

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

class ReasoningStream {
 public:
  explicit ReasoningStream(const ReasoningParser& parser) : parser_(parser) {}
  ReasoningDelta feed(std::string_view delta);
  ReasoningDelta finish();
  // The end tag has been seen: everything from here on is content.
  bool ended() const { return ended_; }

 private:
  ReasoningDelta advance(const ReasoningSplit& s);
  const ReasoningParser& parser_;
  std::string text_;
  size_t reasoning_sent_ = 0, content_sent_ = 0;
  bool ended_ = false;
};

}  // namespace vllm::server
