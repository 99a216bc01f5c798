// A first-in first-out queue that keeps its storage: std::deque allocates
// a node per element once an element is as large as its node (a queued
// operation is), that is an allocation and a free per operation. Here the
// storage is a vector, cleared (keeping its capacity) whenever the queue
// empties and compacted when the popped front is most of it, so a queue
// that never empties stays bounded too.
//
//   Fifo<Item> q;
//   q.push_back(item);
//   Item first = std::move(q.front());
//   q.pop_front();
#ifndef TPX_COMM_UCX_FIFO_H_
#define TPX_COMM_UCX_FIFO_H_

#include <cstddef>
#include <utility>
#include <vector>

namespace tpx::ucx {

template <typename T>
class Fifo {
 public:
  bool empty() const { return head_ == items_.size(); }
  size_t size() const { return items_.size() - head_; }
  void push_back(T item) { items_.push_back(std::move(item)); }
  T& front() { return items_[head_]; }
  void pop_front() {
    ++head_;
    if (head_ == items_.size()) {
      clear();
    } else if (head_ >= kCompactAfter && 2 * head_ >= items_.size()) {
      items_.erase(items_.begin(), items_.begin() + head_);
      head_ = 0;
    }
  }
  void clear() {
    items_.clear();
    head_ = 0;
  }
  typename std::vector<T>::iterator begin() { return items_.begin() + head_; }
  typename std::vector<T>::iterator end() { return items_.end(); }

 private:
  static constexpr size_t kCompactAfter = 64;
  std::vector<T> items_;
  size_t head_ = 0;  // items before it were popped
};

}  // namespace tpx::ucx

#endif  // TPX_COMM_UCX_FIFO_H_
