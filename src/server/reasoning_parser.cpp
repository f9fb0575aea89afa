// deepseek_r1 and qwen3 as vLLM splits their output: an optional leading <think>, reasoning up
// to </think>, content after it. Without </think>, deepseek_r1 and qwen3 read the output as a
// think block cut short (all reasoning); qwen3 also ends reasoning at a <tool_call> that opens
// a <function=...> (Qwen3.5 calls tools without closing the block), and with enable_thinking
// false reads everything as content.
#include "server/reasoning_parser.h"

#include "server/marker_scan.h"
#include "util/check.h"

namespace vllm::server {
namespace {

constexpr std::string_view kToolCall = "<tool_call>", kFunction = "<function";

enum class ToolStart { kNo, kMaybe, kYes };

// Does a qwen3 tool call (<tool_call>, whitespace, <function) start at body[at]?
ToolStart tool_call_at(std::string_view body, size_t at) {
  size_t p = at + kToolCall.size();
  while (p < body.size() && is_ws(body[p])) ++p;
  const std::string_view rest = body.substr(p);
  if (rest.starts_with(kFunction)) return ToolStart::kYes;
  return kFunction.starts_with(rest) ? ToolStart::kMaybe : ToolStart::kNo;
}

}  // namespace

const std::vector<std::string>& ReasoningParser::names() {
  static const std::vector<std::string> n = {"deepseek_r1", "qwen3"};
  return n;
}

std::unique_ptr<ReasoningParser> ReasoningParser::make(const std::string& name,
                                                       bool thinking_enabled) {
  if (name != "deepseek_r1" && name != "qwen3")
    throw Error("unknown reasoning parser '" + name + "'");
  return std::unique_ptr<ReasoningParser>(new ReasoningParser(name, thinking_enabled));
}

ReasoningParser::ReasoningParser(std::string name, bool thinking_enabled)
    : name_(std::move(name)), disabled_(name_ == "qwen3" && !thinking_enabled) {}

ReasoningSplit ReasoningParser::split(std::string_view text) const { return scan(text, true); }

ReasoningSplit ReasoningParser::scan(std::string_view text, bool final) const {
  ReasoningSplit out;
  if (disabled_) {
    out.ended = true;
    out.content = std::string(text);
    return out;
  }
  size_t lead = 0;
  while (lead < text.size() && is_ws(text[lead])) ++lead;
  std::string_view body = text;
  if (text.substr(lead).starts_with(start_)) {
    body = text.substr(lead + start_.size());
  } else if (!final && std::string_view(start_).starts_with(text.substr(lead))) {
    return out;  // may still become <think>
  }
  const size_t end = body.find(end_);
  if (name_ == "qwen3") {
    // A tool call that opens before any </think> ends the reasoning there (whichever comes
    // first wins, whole or streamed).
    const std::string_view before = body.substr(0, end);
    for (size_t at = before.find(kToolCall); at != std::string_view::npos;
         at = before.find(kToolCall, at + 1)) {
      const ToolStart t = tool_call_at(body, at);
      if (t == ToolStart::kYes) {
        out.ended = true;
        if (at) out.reasoning = std::string(body.substr(0, at));
        out.content = std::string(body.substr(at));
        return out;
      }
      if (t == ToolStart::kMaybe && !final) {
        out.reasoning = std::string(body.substr(0, at));
        return out;
      }
    }
    if (end == std::string_view::npos && !final) {
      const size_t held = std::max(held_back(body, end_), held_back(body, kToolCall));
      out.reasoning = std::string(body.substr(0, body.size() - held));
      return out;
    }
  }
  if (end != std::string_view::npos) {
    out.ended = true;
    out.reasoning = std::string(body.substr(0, end));
    if (end + end_.size() < body.size()) out.content = std::string(body.substr(end + end_.size()));
    return out;
  }
  const size_t keep = body.size() - (final ? 0 : held_back(body, end_));
  out.reasoning = std::string(body.substr(0, keep));
  return out;
}

ReasoningDelta ReasoningStream::advance(const ReasoningSplit& s) {
  ReasoningDelta d;
  if (s.reasoning && s.reasoning->size() > reasoning_sent_) {
    d.reasoning = s.reasoning->substr(reasoning_sent_);
    reasoning_sent_ = s.reasoning->size();
  }
  ended_ = s.ended;
  if (s.content) {
    if (s.content->size() > content_sent_) {
      d.content = s.content->substr(content_sent_);
      content_sent_ = s.content->size();
    }
  }
  return d;
}

ReasoningDelta ReasoningStream::feed(std::string_view delta) {
  text_ += delta;
  if (ended_) {  // past the end tag everything is content: no need to look again
    content_sent_ += delta.size();
    return {"", std::string(delta)};
  }
  return advance(parser_.scan(text_, false));
}

ReasoningDelta ReasoningStream::finish() { return advance(parser_.scan(text_, true)); }

}  // namespace vllm::server
