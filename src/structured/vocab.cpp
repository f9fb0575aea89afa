#include "structured/vocab.h"

#include <algorithm>
#include <deque>

#include "tokenizer/byte_level.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer.h"
#include "util/check.h"

namespace vllm::structured {

TokenVocab::TokenVocab(std::vector<std::optional<std::string>> bytes,
                       std::vector<int32_t> eos_ids, int32_t vocab_size, Encoder encode)
    : vocab_size_(std::max<int32_t>(vocab_size, static_cast<int32_t>(bytes.size()))),
      bytes_(std::move(bytes)),
      eos_ids_(std::move(eos_ids)),
      encode_(std::move(encode)) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < static_cast<int32_t>(bytes_.size()); ++id)
    if (bytes_[id] && !bytes_[id]->empty() && !is_eos(id)) {
      ids.push_back(id);
      max_token_bytes_ = std::max(max_token_bytes_, static_cast<int>(bytes_[id]->size()));
    }
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return *bytes_[a] < *bytes_[b] || (*bytes_[a] == *bytes_[b] && a < b);
  });
  // Breadth first, so that each node's children get consecutive ids. A node covers a range of
  // the sorted ids sharing `depth` leading bytes; those exactly `depth` long end there.
  struct Pending {
    size_t lo, hi, depth;
  };
  std::deque<Pending> queue{{0, ids.size(), 0}};
  node_byte_.push_back(0);
  first_child_.push_back(0);
  num_children_.push_back(0);
  std::vector<std::vector<int32_t>> ending;  // per node
  for (int node = 0; !queue.empty(); ++node) {
    auto [lo, hi, depth] = queue.front();
    queue.pop_front();
    ending.emplace_back();
    while (lo < hi && bytes_[ids[lo]]->size() == depth) ending.back().push_back(ids[lo++]);
    first_child_[node] = static_cast<int32_t>(node_byte_.size());
    while (lo < hi) {
      const uint8_t b = static_cast<uint8_t>((*bytes_[ids[lo]])[depth]);
      size_t end = lo;
      while (end < hi && static_cast<uint8_t>((*bytes_[ids[end]])[depth]) == b) ++end;
      node_byte_.push_back(b);
      first_child_.push_back(0);
      num_children_.push_back(0);
      ++num_children_[node];
      queue.push_back({lo, end, depth + 1});
      lo = end;
    }
  }
  token_begin_.push_back(0);
  for (const auto& e : ending) {
    token_ids_.insert(token_ids_.end(), e.begin(), e.end());
    token_begin_.push_back(static_cast<int32_t>(token_ids_.size()));
  }
}

bool TokenVocab::is_eos(int32_t id) const {
  return std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
}

std::shared_ptr<const TokenVocab> TokenVocab::from_tokenizer(const Tokenizer& tok,
                                                             std::vector<int32_t> eos_ids,
                                                             int32_t vocab_size) {
  const tok::Pipeline& p = tok.pipeline();
  const auto& alphabet = tok::byte_level().char_to_byte;
  std::vector<std::optional<std::string>> bytes(p.id_to_token.size());
  for (int32_t id = 0; id < static_cast<int32_t>(bytes.size()); ++id) {
    if (!p.known(id) || p.special(id)) continue;
    const std::string& t = p.id_to_token[id];
    if (p.byte_token(id)) {
      if (auto b = tok::parse_byte_token(t)) bytes[id] = std::string(1, static_cast<char>(*b));
      continue;
    }
    if (!p.decoder) {
      bytes[id] = t;
      continue;
    }
    // The decoder chain on a fixed first token, so that a leading space survives the Strip a
    // SentencePiece decoder applies to the start of the text.
    std::vector<std::string> chain{"a", t};
    p.decoder->decode_chain(chain);
    std::string text;
    for (const auto& s : chain) text += s;
    if (text.find("\xEF\xBF\xBD") == std::string::npos && !text.empty() && text[0] == 'a') {
      bytes[id] = text.substr(1);
      continue;
    }
    // A partial UTF-8 sequence came back replaced: map the byte-level alphabet by hand.
    std::string raw;
    bool ok = true;
    for (size_t i = 0; i < t.size() && ok;) {
      const unsigned char c0 = static_cast<unsigned char>(t[i]);
      char32_t cp;
      int len = c0 < 0x80 ? 1 : c0 < 0xE0 ? 2 : c0 < 0xF0 ? 3 : 4;
      if (i + len > t.size()) break;
      cp = len == 1 ? c0 : (c0 & (0xFF >> (len + 1)));
      for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(t[i + k]) & 0x3F);
      i += len;
      if (cp < alphabet.size() && alphabet[cp] >= 0)
        raw.push_back(static_cast<char>(alphabet[cp]));
      else
        ok = false;
    }
    if (ok) bytes[id] = raw;
    else bytes[id] = text.substr(text.empty() ? 0 : 1);
  }
  const Tokenizer* t = &tok;
  return std::make_shared<TokenVocab>(
      std::move(bytes), std::move(eos_ids), vocab_size,
      [t](std::string_view text) { return t->encode(text, /*add_special_tokens=*/false); });
}

}  // namespace vllm::structured
