// ZERO_API marks what zero's shared libraries export: the public API of include/zero/.
// Everything else is compiled with hidden visibility (-fvisibility=hidden, CMakeLists.txt), so a
// program cannot link against an internal by accident, internal calls bind directly inside the
// library, and its symbol table holds the API alone. Classes whose type identity crosses the
// library boundary (exceptions, interfaces with virtual functions, modules) are marked as a
// whole, so their vtables and typeinfo are exported too.
#pragma once

#if defined(_WIN32)
#define ZERO_API
#else
#define ZERO_API __attribute__((visibility("default")))
#endif

// ZERO_INTERNAL_API: exported for zero's own other libraries (zero_gpt2: the GPT-2 model, data,
// decoder and console; zero_cuda: the NCCL backend) and nothing else. Used only in src/ headers, never in include/zero/:
// programs cannot reach it, and it may change at any time.
#define ZERO_INTERNAL_API ZERO_API
