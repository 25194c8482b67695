#include "worker/engine/heap_peak.h"

#include <malloc.h>

#include <algorithm>

namespace mtrain {

int64_t HeapBytesInUse() {
  const struct mallinfo2 info = mallinfo2();
  // uordblks: allocated from the arenas; hblkhd: large blocks mapped on their own.
  return static_cast<int64_t>(info.uordblks + info.hblkhd);
}

void HeapPeak::Sample() { peak_bytes_ = std::max(peak_bytes_, HeapBytesInUse()); }

}  // namespace mtrain
