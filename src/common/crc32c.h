// CRC-32C (Castagnoli), the checksum of TensorBoard's record format (and of swap-file records:
// iSCSI's polynomial, which x86's SSE4.2 computes in hardware).
#pragma once

#include <cstddef>
#include <cstdint>

#include "zero/export.h"

namespace zero {

/// CRC-32C of `bytes` continuing `crc` (0 to start): reflected polynomial 0x82F63B78, initial
/// and final XOR 0xFFFFFFFF, as RFC 3720 and TFRecord define it. The SSE4.2 crc32 instruction
/// where the CPU has it (checked at run time), else a table.
ZERO_INTERNAL_API uint32_t crc32c(const void* bytes, size_t size, uint32_t crc = 0);

/// The CRC-32C of A || B from crc32c(A), crc32c(B) and B's length: so that pieces of one
/// buffer can be summed apart (on several threads, as they arrive) and joined.
ZERO_INTERNAL_API uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b);

/// The same CRC by the table alone, byte by byte: the reference the tests hold crc32c to.
ZERO_INTERNAL_API uint32_t crc32c_reference(const void* bytes, size_t size, uint32_t crc = 0);

}  // namespace zero
