/* The worker's record of the system calls its seccomp filter refused (harness/sandbox.py).
   The filter answers a refused call with SECCOMP_RET_TRAP: the kernel skips the call and sends
   SIGSYS to the thread that made it; this handler notes the call's number, its arguments and,
   where one argument is a path, the path, then makes the call return -EPERM, so the caller sees
   an ordinary refusal and the harness reads the record after the candidate's call returns.
   Built by the harness (never by a candidate) with the system C compiler. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <ucontext.h>

#define SOCRATIC_SANDBOX_MAX 64
#define SOCRATIC_SANDBOX_PATH 256

struct socratic_sandbox_attempt {
  int nr;
  int in_candidate;
  unsigned long long args[6];
  char path[SOCRATIC_SANDBOX_PATH];
};

volatile int socratic_sandbox_count = 0;
volatile int socratic_sandbox_in_candidate = 0;
/* For each system call number, which argument is a path (-1: none); set by the harness. */
signed char socratic_sandbox_path_arg[1024];
struct socratic_sandbox_attempt socratic_sandbox_attempts[SOCRATIC_SANDBOX_MAX];

static void on_sigsys(int sig, siginfo_t* info, void* context) {
  (void)sig;
  ucontext_t* uc = (ucontext_t*)context;
  unsigned long long args[6];
#if defined(__x86_64__)
  greg_t* r = uc->uc_mcontext.gregs;
  args[0] = r[REG_RDI]; args[1] = r[REG_RSI]; args[2] = r[REG_RDX];
  args[3] = r[REG_R10]; args[4] = r[REG_R8]; args[5] = r[REG_R9];
#elif defined(__aarch64__)
  for (int i = 0; i < 6; ++i) args[i] = uc->uc_mcontext.regs[i];
#endif
  int nr = info->si_syscall;
  int i = __atomic_fetch_add(&socratic_sandbox_count, 1, __ATOMIC_SEQ_CST);
  if (i < SOCRATIC_SANDBOX_MAX) {
    struct socratic_sandbox_attempt* a = &socratic_sandbox_attempts[i];
    a->nr = nr;
    a->in_candidate = socratic_sandbox_in_candidate;
    for (int k = 0; k < 6; ++k) a->args[k] = args[k];
    a->path[0] = 0;
    int which = (nr >= 0 && nr < 1024) ? socratic_sandbox_path_arg[nr] : -1;
    if (which >= 0 && which < 6 && args[which] != 0) {
      const char* p = (const char*)args[which];
      int n = 0;
      for (; n < SOCRATIC_SANDBOX_PATH - 1 && p[n]; ++n) a->path[n] = p[n];
      a->path[n] = 0;
    }
  }
#if defined(__x86_64__)
  r[REG_RAX] = -EPERM;
#elif defined(__aarch64__)
  uc->uc_mcontext.regs[0] = (unsigned long long)(long long)-EPERM;
#endif
}

/* Installs the handler; 0 on success. Called before the filter is installed. */
int socratic_sandbox_arm(void) {
  memset(socratic_sandbox_path_arg, -1, sizeof socratic_sandbox_path_arg);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigsys;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  return sigaction(SIGSYS, &sa, 0);
}
