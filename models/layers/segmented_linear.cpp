#include "models/layers/segmented_linear.h"

#include "engine/backend/gather_columns.h"
#include "engine/common/error.h"

namespace cypris {

void segmented_linear(Backend& b, const std::vector<LinearSegment>& segments, const Tensor& x, const Tensor* bias,
                      Tensor& out) {
  CYPRIS_CHECK(!segments.empty() && x.ndim() == 2 && out.ndim() == 2, "segmented_linear: x {} out {}, {} segments",
               x.shape_str(), out.shape_str(), segments.size());
  const int64_t t = x.shape[0];
  for (size_t i = 0; i < segments.size(); ++i) {
    const LinearSegment& s = segments[i];
    DeviceTensor xs = b.empty(x.dtype, {t, s.columns.view.shape[0]});  // [T, k_s]
    gather_columns(b, x, s.columns.view, xs.view);
    if (i == 0) {
      b.linear(xs.view, s.weight.view, bias, out);
      continue;
    }
    DeviceTensor part = b.empty(out.dtype, {t, out.shape[1]});  // [T, rows]
    b.linear(xs.view, s.weight.view, nullptr, part.view);
    b.add(part.view, out);
  }
}

}  // namespace cypris
