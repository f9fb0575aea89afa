// One chat choice's output text -> the assistant message vLLM returns: reasoning split off
// first (--reasoning-parser), then tool calls read from the content (tool_choice auto with
// --tool-call-parser, required, or a named function). The same pipeline serves the whole
// text (non-streaming) and deltas (streaming).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/reasoning_parser.h"
#include "server/tool_parser.h"

namespace vllm::server {

// What a chat request asks of its output, resolved from tools, tool_choice and the flags.
struct ChatOutputOptions {
  enum class ToolMode { kNone, kAuto, kRequired, kNamed };
  ToolMode mode = ToolMode::kNone;
  std::string named_function;             // kNamed
  std::shared_ptr<const ToolParser> tool_parser;  // kAuto: the server's; kRequired: the list
  std::shared_ptr<const ReasoningParser> reasoning;  // null: no reasoning parser
  bool include_reasoning = true;
  bool parallel_tool_calls = true;  // false: only the first call is returned
  bool mistral_ids = false;
  bool active() const { return mode != ToolMode::kNone || reasoning; }
};

struct ChatMessageOut {
  std::optional<std::string> content;
  std::optional<std::string> reasoning;
  struct Call {
    std::string id;
    ToolCall call;
  };
  std::vector<Call> tool_calls;
  bool tools_called = false;  // finish_reason becomes "tool_calls"
};

// The message of a finished choice's whole text.
ChatMessageOut chat_message(const ChatOutputOptions& o, const std::string& text);
// vLLM's finish_reason: "tool_calls" for auto calls made and for required, else the engine's.
std::string chat_finish_reason(const ChatOutputOptions& o, bool tools_called,
                               const std::string& engine_reason);

struct ChatDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

class ChatOutputStream {
 public:
  explicit ChatOutputStream(const ChatOutputOptions& o);
  ChatDelta feed(const std::string& delta);
  ChatDelta finish();
  // feed(delta), followed by finish() when `last`, merged into one delta.
  ChatDelta feed(const std::string& delta, bool last);
  bool tools_called() const { return tools_ && tools_->num_calls() > 0; }

 private:
  void content(const std::string& text, bool last, ChatDelta& d);
  const ChatOutputOptions& o_;
  std::unique_ptr<ReasoningStream> reasoning_;
  std::unique_ptr<ToolCallStream> tools_;
  std::string named_id_;  // kNamed: the call's id, once announced
};

}  // namespace vllm::server
