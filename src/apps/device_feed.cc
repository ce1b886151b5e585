#include "apps/device_feed.h"

#include <vector>

#include "core/backend.h"
#include "core/status_macros.h"

namespace colonnade {

namespace {

cuda::FeedMean FeedMeanOf(data::MeanMode m) {
  switch (m) {
    case data::MeanMode::kImage:
      return cuda::FeedMean::kImage;
    case data::MeanMode::kChannel:
      return cuda::FeedMean::kChannel;
    case data::MeanMode::kNone:
      break;
  }
  return cuda::FeedMean::kNone;
}

}  // namespace

cuda::FeedAugment FeedAugmentOf(const data::ImageAugment& a) {
  cuda::FeedAugment f;
  f.y0 = a.y0;
  f.x0 = a.x0;
  f.mirror = a.mirror ? 1 : 0;
  for (int c = 0; c < 3; ++c) f.light[c] = a.light[c];
  f.box_h = a.box_h;
  f.box_w = a.box_w;
  f.cut_y0 = a.cut_y0;
  f.cut_x0 = a.cut_x0;
  f.cut_y1 = a.cut_y1;
  f.cut_x1 = a.cut_x1;
  return f;
}

cuda::SyntheticGeometry SyntheticGeometryOf(const data::SyntheticRecipe& r) {
  cuda::SyntheticGeometry g;
  g.height = r.height;
  g.width = r.width;
  g.channels = r.channels;
  g.num_classes = r.num_classes;
  g.image_key = r.image_key;
  g.max_shift = r.max_shift;
  g.noise = r.noise;
  return g;
}

absl::StatusOr<std::unique_ptr<DeviceFeed>> DeviceFeed::Create(const data::Dataset& ds,
                                                               data::BatchPipeline* pipe) {
  if (pipe == nullptr || pipe->output() == data::BatchOutput::kFloatCHWN) {
    return absl::InvalidArgumentError(
        "GPU feed: the pipeline must hand uint8, JPEG or index batches");
  }
  const data::AugmentConfig& a = pipe->augment_config();
  cuda::FeedConfig cfg;
  cfg.height = a.height;
  cfg.width = a.width;
  cfg.channels = a.channels;
  cfg.crop_h = a.crop_h;
  cfg.crop_w = a.crop_w;
  cfg.mean = FeedMeanOf(a.mean);
  cfg.scale = a.scale;
  cfg.resize = a.resized_crop.on || a.eval_box > 0;
  if (a.mean == data::MeanMode::kImage) cfg.mean_image = a.mean_image;
  if (a.mean == data::MeanMode::kChannel) cfg.channel_mean = a.channel_mean;
  cfg.max_batch = static_cast<int>(pipe->local_batch());
  cfg.jpeg = pipe->output() == data::BatchOutput::kEncoded;
  // Three slots: batch k + 1 is staged while steps k - 1 and k may still be queued, and
  // its slot (last used by step k - 2) is then normally free: Stage does not wait for the
  // step before (nvJPEG's decoding blocks the host until its slot is free).
  cfg.slots = 3;
  if (pipe->output() == data::BatchOutput::kIndicesOnly) {
    const data::SyntheticRecipe* r = ds.synthetic_recipe();
    if (r == nullptr) {
      return absl::InvalidArgumentError(
          "GPU feed: indices-only batches need a dataset the device can generate (synthetic)");
    }
    cfg.synthetic = true;
    cfg.synthetic_geometry = SyntheticGeometryOf(*r);
    cfg.synthetic_grid = r->grid;
    // The whole dataset in a device-resident pool when it takes at most 4 GiB and an
    // eighth of the free device memory (AlexNet's default 8,192 synthetic images of
    // 224 x 224 x 3: 1,176 MiB), so the feed copies a batch instead of generating it.
    const int64_t images = ds.info().size;
    const size_t bytes = static_cast<size_t>(images) * a.height * a.width * a.channels;
    const size_t available = GetBackend(Device::kCUDA)->AvailableBytes();  // 0: unknown
    if (bytes <= (size_t{4} << 30) && (available == 0 || bytes <= available / 8)) {
      cfg.synthetic_pool = images;
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<cuda::BatchFeed> feed, cuda::BatchFeed::Create(cfg));
  return std::unique_ptr<DeviceFeed>(new DeviceFeed(pipe, std::move(feed)));
}

DeviceFeed::~DeviceFeed() { RecycleCopied(/*wait=*/true); }

absl::Status DeviceFeed::Stage(const data::Batch& b) {
  const int n = static_cast<int>(b.indices.size());
  std::vector<cuda::FeedAugment> augs(b.augments.size());
  for (size_t j = 0; j < augs.size(); ++j) augs[j] = FeedAugmentOf(b.augments[j]);
  cuda::HostBatch hb;
  hb.n = n;
  hb.pixels = b.pixels.empty() ? nullptr : b.pixels.data();
  if (!b.encoded.empty()) {  // read by nvJPEG during Stage; the streams live in `b`
    jpeg_data_.resize(b.encoded.size());
    jpeg_sizes_.resize(b.encoded.size());
    for (size_t j = 0; j < b.encoded.size(); ++j) {
      jpeg_data_[j] = reinterpret_cast<const uint8_t*>(b.encoded[j].data());
      jpeg_sizes_[j] = b.encoded[j].size();
    }
    hb.jpeg = jpeg_data_.data();
    hb.jpeg_sizes = jpeg_sizes_.data();
  }
  hb.indices = b.indices.data();
  hb.augments = augs.data();
  hb.labels = b.labels.data();
  ASSIGN_OR_RETURN(uint64_t ticket, feed_->Stage(hb));
  tickets_.emplace_back(b.labels.data(), ticket);
  return absl::OkStatus();
}

const char* DeviceFeed::jpeg_backend() const { return feed_->jpeg_backend(); }

absl::Status DeviceFeed::Produce(Tensor* images, Tensor* labels) {
  RETURN_IF_ERROR(feed_->Produce(images, labels));
  RecycleCopied(/*wait=*/false);
  return absl::OkStatus();
}

void DeviceFeed::EndProduce() {
  feed_->EndProduce();
  RecycleCopied(/*wait=*/false);
}

absl::Status DeviceFeed::ProduceView(int view, bool last, Tensor* images, Tensor* labels) {
  RETURN_IF_ERROR(feed_->ProduceView(view, last, images, labels));
  if (last) RecycleCopied(/*wait=*/false);
  return absl::OkStatus();
}

absl::Status DeviceFeed::ProduceView(const data::ImageAugment& view, bool last, Tensor* images,
                                     Tensor* labels) {
  RETURN_IF_ERROR(feed_->ProduceView(FeedAugmentOf(view), last, images, labels));
  if (last) RecycleCopied(/*wait=*/false);
  return absl::OkStatus();
}

void DeviceFeed::Recycle(data::Batch&& b) {
  uint64_t ticket = 0;
  for (auto it = tickets_.begin(); it != tickets_.end(); ++it) {
    if (it->first == b.labels.data()) {
      ticket = it->second;
      tickets_.erase(it);
      break;
    }
  }
  held_.emplace_back(ticket, std::move(b));
  RecycleCopied(/*wait=*/false);
}

void DeviceFeed::RecycleCopied(bool wait) {
  while (!held_.empty()) {
    const uint64_t ticket = held_.front().first;
    if (wait) {
      feed_->WaitHostBatch(ticket);
    } else if (!feed_->HostBatchDone(ticket)) {
      return;  // copies finish in order: the later ones are not done either
    }
    pipe_->Recycle(std::move(held_.front().second));
    held_.pop_front();
  }
}

data::HostBytesAllocator PinnedBytesAllocator(Device for_device) {
  return [for_device](size_t n) {
    Backend* backend = GetBackend(for_device);
    void* p = backend != nullptr ? backend->AllocateHostPinned(n > 0 ? n : 1) : nullptr;
    if (p == nullptr) return data::HostBytes(n);
    return data::HostBytes(p, n, [backend](void* q) { backend->FreeHostPinned(q); });
  };
}

}  // namespace colonnade
