// Thread-safety annotations: let Clang check at compile time which mutex
// guards which data, and which functions must (or must not) be entered with a
// mutex held.
//
// Under Clang each macro expands to the matching `__attribute__((...))` of
// Clang's thread-safety analysis (-Wthread-safety, on in every Clang build of
// Granary, an error there); under any other compiler each expands to nothing,
// so the annotations cost nothing and change no behaviour. The capability
// types they name live in common/mutex.h (Mutex, SharedMutex and their scoped
// locks); std::mutex itself carries no annotations in libstdc++.
//
// Usage, on a class's members:
//   mutable Mutex mu_;             // guards count_; taken after Engine::mu_
//   int count_ GUARDED_BY(mu_);    // read or written only with mu_ held
//   Thing* thing_ PT_GUARDED_BY(mu_);  // the pointee (not the pointer) needs mu_
//   void BumpLocked() REQUIRES(mu_);   // the caller holds mu_
//   void Bump() EXCLUDES(mu_);         // takes mu_ itself; the caller must not hold it
// A lambda run under the lock (a condition variable's predicate) carries
// REQUIRES(mu_) after its parameter list: `[this]() REQUIRES(mu_) { ... }`.
//
// NO_THREAD_SAFETY_ANALYSIS turns the check off for one function; use it only
// where a correct pattern escapes the analysis (a lock handed across
// functions), with a comment saying why.
//
// Thread safety: compile-time only; nothing here exists at run time.
#pragma once

#if defined(__clang__)
#define GRANARY_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define GRANARY_THREAD_ANNOTATION_(x)
#endif

// On a class: its objects are capabilities (mutexes) named `x` in diagnostics.
#define CAPABILITY(x) GRANARY_THREAD_ANNOTATION_(capability(x))

// On an RAII class: it acquires a capability in its constructor and releases
// it in its destructor.
#define SCOPED_CAPABILITY GRANARY_THREAD_ANNOTATION_(scoped_lockable)

// On a data member: read only with `x` held (shared or exclusive), written
// only with `x` held exclusively.
#define GUARDED_BY(x) GRANARY_THREAD_ANNOTATION_(guarded_by(x))

// On a pointer member: the data it points to is guarded by `x`.
#define PT_GUARDED_BY(x) GRANARY_THREAD_ANNOTATION_(pt_guarded_by(x))

// On a mutex member: the lock order. This mutex is taken before (after) the
// listed ones whenever both are held. Checked only under -Wthread-safety-beta;
// everywhere else it documents the order.
#define ACQUIRED_BEFORE(...) GRANARY_THREAD_ANNOTATION_(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) GRANARY_THREAD_ANNOTATION_(acquired_after(__VA_ARGS__))

// On a function: the caller holds the capabilities exclusively (REQUIRES) or
// at least shared (REQUIRES_SHARED) on entry, and they stay held on return.
#define REQUIRES(...) GRANARY_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) GRANARY_THREAD_ANNOTATION_(requires_shared_capability(__VA_ARGS__))

// On a function: it acquires (releases) the capabilities; with no argument
// on a capability's own method or a scoped lock, `this` (the held lock).
#define ACQUIRE(...) GRANARY_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) GRANARY_THREAD_ANNOTATION_(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) GRANARY_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) GRANARY_THREAD_ANNOTATION_(release_shared_capability(__VA_ARGS__))

// On a function returning bool: it acquired the capability iff it returned
// the first argument (`TRY_ACQUIRE(true)`).
#define TRY_ACQUIRE(...) GRANARY_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))

// On a function: the caller must not hold the capabilities (the function
// takes them itself; holding one would self-deadlock).
#define EXCLUDES(...) GRANARY_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))

// On a function: after it returns the analysis assumes the capability held
// (a run-time assertion, or a no-op whose precondition the caller guarantees).
#define ASSERT_CAPABILITY(x) GRANARY_THREAD_ANNOTATION_(assert_capability(x))

// On a function: it returns a reference to (or pointer to) the capability `x`.
#define RETURN_CAPABILITY(x) GRANARY_THREAD_ANNOTATION_(lock_returned(x))

// On a function: the analysis skips its body.
#define NO_THREAD_SAFETY_ANALYSIS GRANARY_THREAD_ANNOTATION_(no_thread_safety_analysis)
