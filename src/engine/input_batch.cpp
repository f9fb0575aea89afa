#include "engine/input_batch.h"

#include "util/check.h"

namespace vllm {

using core::ScheduledKind;
using core::ScheduledRequest;

InputBatch::InputBatch(int num_groups, int block_size)
    : num_groups_(num_groups), block_size_(block_size) {
  VLLM_CHECK(num_groups >= 1 && block_size >= 1, "input batch of ", num_groups,
             " groups and block size ", block_size);
  batch_.attn.resize(num_groups);
  batch_.slot_mappings.resize(num_groups);
  tables_.reserve(num_groups);
  for (AttentionMeta& a : batch_.attn) {
    tables_.emplace_back(&a.block_tables);
    a.query_start_loc = {0};
    a.max_blocks_per_seq = tables_.back().width();
  }
}

int InputBatch::add_row(const std::string& id, const std::vector<std::vector<int>>& tables,
                        int seq_len) {
  VLLM_CHECK(static_cast<int>(tables.size()) == num_groups_, "request ", id, " has tables for ",
             tables.size(), " KV cache groups, the batch ", num_groups_);
  const int row = num_rows();
  for (int g = 0; g < num_groups_; ++g) tables_[g].add_row(tables[g]);
  row_ids_.push_back(id);
  row_of_[id] = row;
  batch_.attn[0].seq_lens.push_back(seq_len);
  sched_index_.push_back(-1);
  first_logits_row_.push_back(0);
  return row;
}

void InputBatch::remove_row(int row) {
  const int last = num_rows() - 1;
  row_of_.erase(row_ids_[row]);
  for (BlockTable& t : tables_) t.remove_row(row);
  if (row != last) {
    row_ids_[row] = std::move(row_ids_[last]);
    row_of_[row_ids_[row]] = row;
    batch_.attn[0].seq_lens[row] = batch_.attn[0].seq_lens[last];
    sched_index_[row] = sched_index_[last];
    first_logits_row_[row] = first_logits_row_[last];
  }
  row_ids_.pop_back();
  batch_.attn[0].seq_lens.pop_back();
  sched_index_.pop_back();
  first_logits_row_.pop_back();
}

void InputBatch::remove_request(const std::string& id) {
  if (auto it = row_of_.find(id); it != row_of_.end()) remove_row(it->second);
  parked_.erase(id);
}

std::vector<std::vector<int>> InputBatch::block_ids(const std::string& id) const {
  if (auto it = parked_.find(id); it != parked_.end()) return it->second.tables;
  auto it = row_of_.find(id);
  if (it == row_of_.end()) return {};
  std::vector<std::vector<int>> out;
  for (const BlockTable& t : tables_) {
    auto r = t.row(it->second);
    out.emplace_back(r.begin(), r.end());
  }
  return out;
}

void InputBatch::apply_edits(int row, const ScheduledRequest& s) {
  // A lost or repeated step would leave the tables wrong without this.
  VLLM_CHECK(s.num_computed_tokens == batch_.attn[0].seq_lens[row], "request ", s.request_id,
             " continues at position ", s.num_computed_tokens, " but its row holds ",
             batch_.attn[0].seq_lens[row], " tokens");
  VLLM_CHECK(static_cast<int>(s.new_block_ids.size()) == num_groups_ &&
                 (s.num_null_blocks.empty() ||
                  static_cast<int>(s.num_null_blocks.size()) == num_groups_),
             "running request ", s.request_id, " has edits for ", s.new_block_ids.size(),
             " groups, the batch ", num_groups_);
  for (int g = 0; g < num_groups_; ++g) {
    tables_[g].append(row, s.new_block_ids[g]);
    if (!s.num_null_blocks.empty()) tables_[g].set_null_prefix(row, s.num_null_blocks[g]);
  }
}

const ForwardBatch& InputBatch::prepare(const core::SchedulerOutput& out,
                                        std::span<const int> prompt_logits_end) {
  VLLM_CHECK(prompt_logits_end.empty() || prompt_logits_end.size() == out.scheduled.size(),
             "prompt_logits_end for ", prompt_logits_end.size(), " of ", out.scheduled.size(),
             " requests");
  for (const std::string& id : out.finished_req_ids) remove_request(id);
  for (const std::string& id : out.preempted_req_ids) remove_request(id);

  // Running requests scheduled again keep their row; every other row is parked.
  std::fill(sched_index_.begin(), sched_index_.end(), -1);
  without_row_.clear();
  for (int k = 0; k < static_cast<int>(out.scheduled.size()); ++k) {
    const ScheduledRequest& s = out.scheduled[k];
    if (s.kind == ScheduledKind::kRunning) {
      // In steady decoding the rows are in the scheduled order: skip the hash lookup.
      int row = k < num_rows() && row_ids_[k] == s.request_id ? k : -1;
      if (row < 0)
        if (auto it = row_of_.find(s.request_id); it != row_of_.end()) row = it->second;
      if (row >= 0) {
        VLLM_CHECK(sched_index_[row] < 0, "request ", s.request_id, " scheduled twice");
        sched_index_[row] = k;
        continue;
      }
    }
    without_row_.push_back(k);
  }
  // Backwards, so the last row that remove_row moves into a hole is one already kept.
  for (int row = num_rows() - 1; row >= 0; --row) {
    if (sched_index_[row] >= 0) continue;
    Parked p;
    p.seq_len = batch_.attn[0].seq_lens[row];
    for (const BlockTable& t : tables_) {
      auto r = t.row(row);
      p.tables.emplace_back(r.begin(), r.end());
    }
    parked_[row_ids_[row]] = std::move(p);
    remove_row(row);
  }

  for (int row = 0; row < num_rows(); ++row) apply_edits(row, out.scheduled[sched_index_[row]]);
  for (int k : without_row_) {
    const ScheduledRequest& s = out.scheduled[k];
    int row;
    if (s.kind == ScheduledKind::kRunning) {
      auto it = parked_.find(s.request_id);
      VLLM_CHECK(it != parked_.end(), "running request ", s.request_id,
                 " never came to the runner with its whole block table");
      row = add_row(s.request_id, it->second.tables, it->second.seq_len);
      parked_.erase(it);
      apply_edits(row, s);
    } else {
      parked_.erase(s.request_id);  // (re)starts from its whole table
      row = add_row(s.request_id, s.block_ids, s.num_computed_tokens);
    }
    sched_index_[row] = k;
  }
  VLLM_CHECK(num_rows() == static_cast<int>(out.scheduled.size()), "batch of ", num_rows(),
             " rows for ", out.scheduled.size(), " scheduled requests");
  fill_tokens(out, prompt_logits_end);
  return batch_;
}

// O(scheduled tokens): these arrays change every step anyway.
void InputBatch::fill_tokens(const core::SchedulerOutput& out,
                             std::span<const int> prompt_logits_end) {
  ForwardBatch& b = batch_;
  AttentionMeta& a0 = b.attn[0];
  b.token_ids.clear();
  b.positions.clear();
  for (auto& slots : b.slot_mappings) slots.clear();
  b.logits_indices.clear();
  a0.query_start_loc.resize(1);
  const int bs = block_size_;
  for (int row = 0; row < num_rows(); ++row) {
    const int k = sched_index_[row];
    const ScheduledRequest& s = out.scheduled[k];
    const int n = s.num_scheduled_tokens;
    const int first = s.num_computed_tokens, end = first + n;
    VLLM_CHECK(n > 0 && static_cast<int>(s.token_ids.size()) == n, "request ", s.request_id,
               " scheduled with ", n, " tokens and ", s.token_ids.size(), " token ids");
    const int start = static_cast<int>(b.token_ids.size());
    for (int i = 0; i < n; ++i) {
      b.token_ids.push_back(s.token_ids[i]);
      b.positions.push_back(first + i);
    }
    for (int g = 0; g < num_groups_; ++g) {
      const std::span<const int32_t> table = tables_[g].row(row);
      VLLM_CHECK(int64_t(end) <= int64_t(table.size()) * bs, "request ", s.request_id,
                 " reaches position ", end - 1, " past its ", table.size(), " blocks in group ",
                 g);
      std::vector<int32_t>& slots = b.slot_mappings[g];
      for (int pos = first; pos < end; ++pos) slots.push_back(table[pos / bs] * bs + pos % bs);
    }
    a0.query_start_loc.push_back(start + n);
    a0.seq_lens[row] = end;
    // Prompt logprobs need every prompt position of the chunk; sampling needs the last row.
    first_logits_row_[row] = static_cast<int>(b.logits_indices.size());
    if (!prompt_logits_end.empty())
      for (int i = 0; i < n && first + i < prompt_logits_end[k]; ++i)
        b.logits_indices.push_back(start + i);
    if (s.sample) b.logits_indices.push_back(start + n - 1);
  }
  for (int g = 0; g < num_groups_; ++g) {
    AttentionMeta& a = b.attn[g];
    a.max_blocks_per_seq = tables_[g].width();
    if (g == 0) continue;
    a.query_start_loc = a0.query_start_loc;
    a.seq_lens = a0.seq_lens;
  }
}

}  // namespace vllm
