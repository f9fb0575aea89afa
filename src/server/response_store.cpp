#include "server/response_store.h"

namespace vllm::server {

bool ResponseStore::put(const std::string& id, StoredResponse entry) {
  const size_t bytes = entry.response.dump().size() + entry.messages.dump().size();
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = slots_.find(id); it != slots_.end()) {
    bytes_ -= it->second.bytes;
    order_.erase(it->second.order);
    slots_.erase(it);
  }
  if (max_count_ == 0 || bytes > max_bytes_) return false;
  while (!order_.empty() && (slots_.size() + 1 > max_count_ || bytes_ + bytes > max_bytes_)) {
    auto oldest = slots_.find(order_.front());
    bytes_ -= oldest->second.bytes;
    slots_.erase(oldest);
    order_.pop_front();
  }
  order_.push_back(id);
  slots_[id] = Slot{std::move(entry), bytes, std::prev(order_.end())};
  bytes_ += bytes;
  return true;
}

std::optional<StoredResponse> ResponseStore::get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slots_.find(id);
  if (it == slots_.end()) return std::nullopt;
  return it->second.entry;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slots_.size();
}

}  // namespace vllm::server
