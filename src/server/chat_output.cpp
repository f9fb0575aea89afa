// The chat output pipeline: reasoning, then tools, whole or streamed (see chat_output.h).
#include "server/chat_output.h"

namespace vllm::server {

using ToolMode = ChatOutputOptions::ToolMode;

ChatMessageOut chat_message(const ChatOutputOptions& o, const std::string& text) {
  ChatMessageOut m;
  std::optional<std::string> content = text;
  if (o.reasoning) {
    ReasoningSplit s = o.reasoning->split(text);
    if (o.include_reasoning) m.reasoning = s.reasoning;
    content = s.content;
  }
  auto add = [&](ToolCall call) {
    m.tool_calls.push_back({make_tool_call_id(o.mistral_ids), std::move(call)});
  };
  switch (o.mode) {
    case ToolMode::kNone:
      m.content = content;
      break;
    case ToolMode::kNamed:
      add({o.named_function, content.value_or("")});
      m.content = "";
      break;
    case ToolMode::kRequired: {
      ParsedTools p = parse_tool_calls(*o.tool_parser, content.value_or(""));
      for (ToolCall& c : p.calls) add(std::move(c));
      m.content = "";
      break;
    }
    case ToolMode::kAuto: {
      if (!content) break;
      ParsedTools p = parse_tool_calls(*o.tool_parser, *content);
      m.content = p.content;
      for (ToolCall& c : p.calls) add(std::move(c));
      m.tools_called = !m.tool_calls.empty();
      break;
    }
  }
  if (!o.parallel_tool_calls && m.tool_calls.size() > 1) m.tool_calls.resize(1);
  return m;
}

std::string chat_finish_reason(const ChatOutputOptions& o, bool tools_called,
                               const std::string& engine_reason) {
  if (o.mode == ToolMode::kAuto && tools_called) return "tool_calls";
  if (o.mode == ToolMode::kRequired && engine_reason == "stop") return "tool_calls";
  return engine_reason;
}

ChatOutputStream::ChatOutputStream(const ChatOutputOptions& o) : o_(o) {
  if (o.reasoning) reasoning_ = std::make_unique<ReasoningStream>(*o.reasoning);
  if ((o.mode == ToolMode::kAuto || o.mode == ToolMode::kRequired) && o.tool_parser)
    tools_ = std::make_unique<ToolCallStream>(*o.tool_parser);
}

void ChatOutputStream::content(const std::string& text, bool last, ChatDelta& d) {
  switch (o_.mode) {
    case ToolMode::kNone:
      d.content += text;
      return;
    case ToolMode::kNamed:
      if (text.empty()) return;
      if (named_id_.empty()) {
        named_id_ = make_tool_call_id(o_.mistral_ids);
        d.tool_calls.push_back({0, named_id_, o_.named_function, text});
      } else {
        d.tool_calls.push_back({0, std::nullopt, std::nullopt, text});
      }
      return;
    case ToolMode::kAuto:
    case ToolMode::kRequired: {
      ToolStreamDelta t = tools_->feed(text);
      if (last) {
        ToolStreamDelta f = tools_->finish();
        t.content += f.content;
        for (auto& c : f.calls) t.calls.push_back(std::move(c));
      }
      if (o_.mode == ToolMode::kAuto) d.content += t.content;
      for (auto& c : t.calls)
        if (o_.parallel_tool_calls || c.index == 0) d.tool_calls.push_back(std::move(c));
      return;
    }
  }
}

ChatDelta ChatOutputStream::feed(const std::string& delta) {
  ChatDelta d;
  if (!reasoning_) {
    content(delta, false, d);
    return d;
  }
  ReasoningDelta r = reasoning_->feed(delta);
  if (o_.include_reasoning) d.reasoning = std::move(r.reasoning);
  if (!r.content.empty()) content(r.content, false, d);
  return d;
}

ChatDelta ChatOutputStream::feed(const std::string& delta, bool last) {
  ChatDelta d = feed(delta);
  if (!last) return d;
  ChatDelta f = finish();
  d.reasoning += f.reasoning;
  d.content += f.content;
  for (auto& c : f.tool_calls) d.tool_calls.push_back(std::move(c));
  return d;
}

ChatDelta ChatOutputStream::finish() {
  ChatDelta d;
  std::string rest;
  if (reasoning_) {
    ReasoningDelta r = reasoning_->finish();
    if (o_.include_reasoning) d.reasoning = std::move(r.reasoning);
    rest = std::move(r.content);
  }
  content(rest, true, d);
  return d;
}

}  // namespace vllm::server
