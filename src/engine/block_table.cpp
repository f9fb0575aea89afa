#include "engine/block_table.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/block_pool.h"
#include "util/check.h"

namespace vllm {

BlockTable::BlockTable(std::vector<int32_t>* storage) : rows_(storage) {
  VLLM_CHECK(rows_ != nullptr, "block table without storage");
  rows_->clear();
}

std::span<const int32_t> BlockTable::row(int r) const {
  VLLM_CHECK(r >= 0 && r < num_rows(), "row ", r, " of ", num_rows());
  return {rows_->data() + int64_t(r) * width_, static_cast<size_t>(num_blocks_[r])};
}

// Doubling keeps re-layouts to O(log(longest table)) over a run; the padding past a row's
// blocks is never read (attention stops at seq_lens).
void BlockTable::ensure_width(int num_blocks) {
  if (num_blocks <= width_) return;
  const int width = static_cast<int>(std::bit_ceil(static_cast<unsigned>(num_blocks)));
  std::vector<int32_t> grown(static_cast<size_t>(num_rows()) * width, core::kNullBlockId);
  for (int r = 0; r < num_rows(); ++r)
    std::memcpy(grown.data() + int64_t(r) * width, row_data(r), num_blocks_[r] * sizeof(int32_t));
  *rows_ = std::move(grown);
  width_ = width;
}

void BlockTable::add_row(std::span<const int> block_ids) {
  const int n = static_cast<int>(block_ids.size());
  ensure_width(n);
  rows_->resize(rows_->size() + width_, core::kNullBlockId);
  num_blocks_.push_back(n);
  std::copy(block_ids.begin(), block_ids.end(), row_data(num_rows() - 1));
}

void BlockTable::append(int row, std::span<const int> block_ids) {
  if (block_ids.empty()) return;
  VLLM_CHECK(row >= 0 && row < num_rows(), "row ", row, " of ", num_rows());
  const int n = num_blocks_[row] + static_cast<int>(block_ids.size());
  ensure_width(n);
  std::copy(block_ids.begin(), block_ids.end(), row_data(row) + num_blocks_[row]);
  num_blocks_[row] = n;
}

void BlockTable::set_null_prefix(int row, int n) {
  VLLM_CHECK(row >= 0 && row < num_rows(), "row ", row, " of ", num_rows());
  VLLM_CHECK(n >= 0 && n <= num_blocks_[row], "nulling ", n, " of ", num_blocks_[row],
             " blocks");
  int32_t* d = row_data(row);
  for (int i = n - 1; i >= 0 && d[i] != core::kNullBlockId; --i) d[i] = core::kNullBlockId;
}

void BlockTable::remove_row(int row) {
  VLLM_CHECK(row >= 0 && row < num_rows(), "row ", row, " of ", num_rows());
  const int last = num_rows() - 1;
  if (row != last) {
    // The whole stride: the moved row's padding must stay zero.
    std::memcpy(row_data(row), row_data(last), width_ * sizeof(int32_t));
    num_blocks_[row] = num_blocks_[last];
  }
  num_blocks_.pop_back();
  rows_->resize(rows_->size() - width_);
}

}  // namespace vllm
