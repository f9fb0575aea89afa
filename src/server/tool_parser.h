// Tool-call parsers: model output text -> (content, tool calls), as vLLM's --tool-call-parser
// formats read it, whole (parse) or delta by delta (ToolCallStream). Every format is written as
// one scan over a prefix of the output; a scan of a prefix only reports what no later text can
// change, so streamed deltas always add up to the non-streaming parse of the same text.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vllm::server {

using ojson = nlohmann::ordered_json;

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text, as vLLM writes it (json.dumps, ensure_ascii=False)
};

// What a scan of an output prefix knows for sure.
struct ToolScan {
  struct Call {
    std::string name;       // empty until the whole name is known
    std::string arguments;  // a prefix of the final arguments text
    bool complete = false;
  };
  std::string content;  // a prefix of the final content (all of it when final)
  bool has_content = false;  // content is a value, not null (final scans)
  std::vector<Call> calls;
};

class ToolParser {
 public:
  virtual ~ToolParser() = default;
  // `final`: the whole output (a failed parse turns it all into content, as vLLM does);
  // otherwise a prefix, reporting only what cannot change.
  virtual ToolScan scan(std::string_view text, bool final) const = 0;
  // vLLM's id style of the format: "chatcmpl-tool-<32 hex>" or Mistral's 9 alphanumerics.
  virtual bool mistral_ids() const { return false; }
  // As vLLM's adjust_request: formats whose tags may be special tokens (Mistral's [TOOL_CALLS],
  // Hermes 2 Pro's <tool_call>) keep special tokens in the output text.
  virtual bool keeps_special_tokens() const { return false; }
};

// The parser names of --tool-call-parser this server knows.
const std::vector<std::string>& tool_parser_names();
// `tools`: the request's tool list (qwen3_coder reads parameter types from it); throws
// vllm::Error for an unknown name.
std::unique_ptr<ToolParser> make_tool_parser(const std::string& name, const ojson& tools);
// The parser of tool_choice "required" output: a JSON list of {"name", "parameters"}.
std::unique_ptr<ToolParser> make_required_tool_parser();

struct ParsedTools {
  std::optional<std::string> content;  // null when the output was only tool calls
  std::vector<ToolCall> calls;
};
ParsedTools parse_tool_calls(const ToolParser& parser, std::string_view text);

// One streamed tool-call entry, shaped as vLLM's DeltaToolCall: the first entry of a call
// carries its id, type and name; later ones argument fragments.
struct ToolCallDelta {
  int index = 0;
  std::optional<std::string> id;    // with the name, on the first entry of a call
  std::optional<std::string> name;
  std::string arguments;
  ojson to_json() const;
};

struct ToolStreamDelta {
  std::string content;
  std::vector<ToolCallDelta> calls;
  bool empty() const { return content.empty() && calls.empty(); }
};

// Streams one choice's output through a parser: feed() each text delta, finish() at the end.
class ToolCallStream {
 public:
  explicit ToolCallStream(const ToolParser& parser) : parser_(parser) {}
  ToolStreamDelta feed(std::string_view delta);
  ToolStreamDelta finish();
  int num_calls() const { return static_cast<int>(sent_.size()); }

 private:
  ToolStreamDelta advance(const ToolScan& scan);
  struct Sent {
    std::string id;
    bool named = false;
    size_t arguments = 0;
  };
  const ToolParser& parser_;
  std::string text_;
  std::string content_;  // the content sent so far
  std::vector<Sent> sent_;
};

// vLLM's tool call ids: "chatcmpl-tool-" and 32 hex digits, or Mistral's 9 alphanumerics.
std::string make_tool_call_id(bool mistral);

// JSON text rewritten as Python's json.dumps(ensure_ascii=False) writes it (", " and ": ",
// no other whitespace). Stops before the first token that `text` does not finish; `end` is set
// to the offset just past the value when the value is complete.
struct NormalizedJson {
  std::string out;
  std::optional<size_t> end;
  bool error = false;
};
NormalizedJson normalize_json(std::string_view text, size_t pos = 0);

}  // namespace vllm::server
