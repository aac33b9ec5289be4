#pragma once
/// CONV3DJIT_API marks the declarations that libconv3djit.so exports. The library is compiled
/// with hidden visibility (-fvisibility=hidden -fvisibility-inlines-hidden), so everything else in
/// it, the conv3djit::detail machinery included, stays internal to the shared object.
#if defined(__GNUC__) || defined(__clang__)
#define CONV3DJIT_API __attribute__((visibility("default")))
#else
#define CONV3DJIT_API
#endif
