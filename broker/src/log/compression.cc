#include "log/compression.h"

#include <fmt/core.h>

#include <cstring>

#ifdef TALLY_HAVE_ZLIB
#include <zlib.h>
#endif
#ifdef TALLY_HAVE_LZ4
#include <lz4frame.h>
#endif
#ifdef TALLY_HAVE_ZSTD
#include <zstd.h>
#endif
#ifdef TALLY_HAVE_SNAPPY
#include <snappy-c.h>
#endif

namespace tally::broker {

using base::Result;
using base::Status;

namespace {

[[maybe_unused]] Status TooLarge(const char* codec) {
  return Status::ResourceExhausted(fmt::format("{} batch decompresses to more than {} bytes", codec,
                                               kMaxDecompressedBatchBytes));
}

#ifdef TALLY_HAVE_ZLIB
Result<std::string> Gunzip(std::span<const uint8_t> in) {
  z_stream zs;
  std::memset(&zs, 0, sizeof(zs));
  // 15 + 32: a zlib or gzip header, detected.
  if (inflateInit2(&zs, 15 + 32) != Z_OK) return Status::Internal("inflateInit2 failed");
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  std::string out;
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    if (out.size() >= kMaxDecompressedBatchBytes) {
      inflateEnd(&zs);
      return TooLarge("gzip");
    }
    size_t have = out.size();
    out.resize(have + std::max<size_t>(in.size() * 2, 4096));
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + have);
    zs.avail_out = static_cast<uInt>(out.size() - have);
    rc = inflate(&zs, Z_NO_FLUSH);
    out.resize(out.size() - zs.avail_out);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&zs);
      return Status::Corruption(fmt::format("gzip: inflate error {}", rc));
    }
    if (rc == Z_OK && zs.avail_in == 0 && zs.avail_out != 0) {
      inflateEnd(&zs);
      return Status::Corruption("gzip: truncated stream");
    }
  }
  inflateEnd(&zs);
  return out;
}
#endif

#ifdef TALLY_HAVE_LZ4
Result<std::string> Unlz4(std::span<const uint8_t> in) {
  LZ4F_dctx* ctx = nullptr;
  if (LZ4F_isError(LZ4F_createDecompressionContext(&ctx, LZ4F_VERSION))) {
    return Status::Internal("LZ4F_createDecompressionContext failed");
  }
  std::string out;
  size_t pos = 0;
  while (true) {
    if (out.size() >= kMaxDecompressedBatchBytes) {
      LZ4F_freeDecompressionContext(ctx);
      return TooLarge("lz4");
    }
    size_t have = out.size();
    out.resize(have + std::max<size_t>(in.size() * 2, 65536));
    size_t capacity = out.size() - have;
    size_t dst = capacity;
    size_t src = in.size() - pos;
    size_t hint = LZ4F_decompress(ctx, out.data() + have, &dst, in.data() + pos, &src, nullptr);
    out.resize(have + dst);
    pos += src;
    if (LZ4F_isError(hint)) {
      std::string why = LZ4F_getErrorName(hint);
      LZ4F_freeDecompressionContext(ctx);
      return Status::Corruption(fmt::format("lz4: {}", why));
    }
    if (hint == 0) break;  // the frame is complete
    if (pos == in.size() && dst < capacity) {
      LZ4F_freeDecompressionContext(ctx);
      return Status::Corruption("lz4: truncated frame");
    }
  }
  LZ4F_freeDecompressionContext(ctx);
  return out;
}
#endif

#ifdef TALLY_HAVE_ZSTD
Result<std::string> Unzstd(std::span<const uint8_t> in) {
  ZSTD_DStream* ds = ZSTD_createDStream();
  if (ds == nullptr) return Status::Internal("ZSTD_createDStream failed");
  ZSTD_initDStream(ds);
  std::string out;
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  while (true) {
    if (out.size() >= kMaxDecompressedBatchBytes) {
      ZSTD_freeDStream(ds);
      return TooLarge("zstd");
    }
    size_t have = out.size();
    out.resize(have + std::max<size_t>(in.size() * 2, ZSTD_DStreamOutSize()));
    ZSTD_outBuffer output{out.data() + have, out.size() - have, 0};
    size_t rc = ZSTD_decompressStream(ds, &output, &input);
    out.resize(have + output.pos);
    if (ZSTD_isError(rc)) {
      std::string why = ZSTD_getErrorName(rc);
      ZSTD_freeDStream(ds);
      return Status::Corruption(fmt::format("zstd: {}", why));
    }
    if (rc == 0 && input.pos == input.size) break;  // every frame is complete
    if (input.pos == input.size && output.pos < output.size) {
      ZSTD_freeDStream(ds);
      return Status::Corruption("zstd: truncated frame");
    }
  }
  ZSTD_freeDStream(ds);
  return out;
}
#endif

#ifdef TALLY_HAVE_SNAPPY
Status SnappyBlock(std::span<const uint8_t> in, std::string* out) {
  size_t n = 0;
  const char* src = reinterpret_cast<const char*>(in.data());
  if (snappy_uncompressed_length(src, in.size(), &n) != SNAPPY_OK) {
    return Status::Corruption("snappy: bad block header");
  }
  if (out->size() + n > kMaxDecompressedBatchBytes) return TooLarge("snappy");
  size_t have = out->size();
  out->resize(have + n);
  if (snappy_uncompress(src, in.size(), out->data() + have, &n) != SNAPPY_OK) {
    return Status::Corruption("snappy: bad block");
  }
  out->resize(have + n);
  return Status::Ok();
}

Result<std::string> Unsnappy(std::span<const uint8_t> in) {
  static constexpr uint8_t kXerialMagic[8] = {0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};
  std::string out;
  if (in.size() >= 16 && std::memcmp(in.data(), kXerialMagic, 8) == 0) {
    // The Java client's framing: magic, two int32 versions, then blocks of
    // int32 (big-endian) length + raw snappy.
    size_t pos = 16;
    while (pos < in.size()) {
      if (in.size() - pos < 4) return Status::Corruption("snappy: truncated block length");
      uint32_t len = LoadBe32(in.data() + pos);
      pos += 4;
      if (len > in.size() - pos) return Status::Corruption("snappy: truncated block");
      TALLY_RETURN_IF_ERROR(SnappyBlock(in.subspan(pos, len), &out));
      pos += len;
    }
    return out;
  }
  TALLY_RETURN_IF_ERROR(SnappyBlock(in, &out));
  return out;
}
#endif

}  // namespace

bool CodecAvailable(Compression codec) {
  switch (codec) {
    case Compression::kNone:
      return true;
    case Compression::kGzip:
#ifdef TALLY_HAVE_ZLIB
      return true;
#else
      return false;
#endif
    case Compression::kSnappy:
#ifdef TALLY_HAVE_SNAPPY
      return true;
#else
      return false;
#endif
    case Compression::kLz4:
#ifdef TALLY_HAVE_LZ4
      return true;
#else
      return false;
#endif
    case Compression::kZstd:
#ifdef TALLY_HAVE_ZSTD
      return true;
#else
      return false;
#endif
  }
  return false;
}

Result<std::string> BatchRecordsUncompressed(const BatchHeader& header,
                                             std::span<const uint8_t> batch) {
  if (batch.size() < kBatchHeaderSize) return Status::Corruption("batch shorter than its header");
  std::span<const uint8_t> body = batch.subspan(kBatchHeaderSize);
  Compression codec = header.compression();
  if (!CodecAvailable(codec)) {
    return Status::NotFound(
        fmt::format("compression codec {} is not built in", static_cast<int>(codec)));
  }
  switch (codec) {
    case Compression::kNone:
      return std::string(reinterpret_cast<const char*>(body.data()), body.size());
#ifdef TALLY_HAVE_ZLIB
    case Compression::kGzip:
      return Gunzip(body);
#endif
#ifdef TALLY_HAVE_SNAPPY
    case Compression::kSnappy:
      return Unsnappy(body);
#endif
#ifdef TALLY_HAVE_LZ4
    case Compression::kLz4:
      return Unlz4(body);
#endif
#ifdef TALLY_HAVE_ZSTD
    case Compression::kZstd:
      return Unzstd(body);
#endif
    default:
      break;
  }
  return Status::NotFound(
      fmt::format("compression codec {} is not built in", static_cast<int>(codec)));
}

}  // namespace tally::broker
