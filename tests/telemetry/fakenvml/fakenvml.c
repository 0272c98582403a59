/*
 * A fake NVML: it stands in for NVIDIA hardware and driver on machines without a GPU.
 *
 * Built during the test run (tests/telemetry/conftest.py) as libnvidia-ml.so.1, the
 * soname the real binding (nvidia-ml-py's pynvml) opens, so everything above this C ABI
 * is the code that runs on a GPU machine. It implements only the entry points Gantry
 * calls. What each GPU reports is scripted by a text file the test writes, read again
 * on every call: one line per GPU,
 *
 *     <utilization %> <memory used MiB> <power mW> <temperature C> [<pid>:<MiB> ...]
 *
 * The file's path is compiled in (-DFAKE_NVML_SCRIPT="..."); no file means no GPUs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FAKE_NVML_SCRIPT
#error "build with -DFAKE_NVML_SCRIPT=\"/path/to/script\""
#endif

#define MAX_GPUS 16
#define MAX_PROCS 8

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
};

typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

struct fake_gpu {
    int index;
    unsigned int util, power_mw, temp;
    unsigned long long mem_used_mib;
    unsigned int nprocs;
    unsigned int pids[MAX_PROCS];
    unsigned long long proc_mib[MAX_PROCS];
};
typedef struct fake_gpu *nvmlDevice_t;

static struct fake_gpu gpus[MAX_GPUS];
static int initialised;
static const unsigned long long TOTAL_MIB = 81920;

/* Read the script again; returns the number of GPUs. */
static unsigned int load(void) {
    FILE *fh = fopen(FAKE_NVML_SCRIPT, "r");
    char line[512];
    unsigned int n = 0;
    if (!fh)
        return 0;
    while (n < MAX_GPUS && fgets(line, sizeof line, fh)) {
        struct fake_gpu *g = &gpus[n];
        char *rest = line;
        int used = 0;
        memset(g, 0, sizeof *g);
        g->index = (int)n;
        if (sscanf(rest, "%u %llu %u %u%n", &g->util, &g->mem_used_mib, &g->power_mw,
                   &g->temp, &used) != 4)
            continue;
        rest += used;
        while (g->nprocs < MAX_PROCS &&
               sscanf(rest, " %u:%llu%n", &g->pids[g->nprocs], &g->proc_mib[g->nprocs],
                      &used) == 2) {
            g->nprocs++;
            rest += used;
        }
        n++;
    }
    fclose(fh);
    return n;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; initialised = 1; return NVML_SUCCESS; }
nvmlReturn_t nvmlInit_v2(void) { initialised = 1; return NVML_SUCCESS; }
nvmlReturn_t nvmlInit(void) { initialised = 1; return NVML_SUCCESS; }
nvmlReturn_t nvmlShutdown(void) { initialised = 0; return NVML_SUCCESS; }

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t copy_string(const char *value, char *out, unsigned int length) {
    if (!out || strlen(value) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, value);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    return copy_string("999.99-fake", version, length);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = load();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= load()) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &gpus[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    unsigned int n = load(), i;
    char want[64];
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < n; i++) {
        snprintf(want, sizeof want, "GPU-fa4e0000-0000-0000-0000-%012u", i);
        if (strcmp(want, uuid) == 0) {
            *device = &gpus[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* Every query reads the script again, so a test changes a GPU's load while it runs. */
static struct fake_gpu *fresh(nvmlDevice_t device) {
    unsigned int n = load();
    if (!initialised || !device || device < gpus || device >= gpus + n)
        return NULL;
    return device;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    if (!fresh(device)) return NVML_ERROR_INVALID_ARGUMENT;
    return copy_string("Fake GPU (stands in for hardware)", name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    char value[64];
    struct fake_gpu *g = fresh(device);
    if (!g) return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(value, sizeof value, "GPU-fa4e0000-0000-0000-0000-%012d", g->index);
    return copy_string(value, uuid, length);
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *util) {
    struct fake_gpu *g = fresh(device);
    if (!g || !util) return NVML_ERROR_INVALID_ARGUMENT;
    util->gpu = g->util;
    util->memory = g->util / 2;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    struct fake_gpu *g = fresh(device);
    if (!g || !memory) return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = TOTAL_MIB << 20;
    memory->used = g->mem_used_mib << 20;
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    struct fake_gpu *g = fresh(device);
    if (!g || !power) return NVML_ERROR_INVALID_ARGUMENT;
    *power = g->power_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp) {
    struct fake_gpu *g = fresh(device);
    if (!g || !temp || sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = g->temp;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    struct fake_gpu *g = fresh(device);
    unsigned int i;
    if (!g || !count) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->nprocs == 0) {
        *count = 0;
        return NVML_SUCCESS;
    }
    if (!infos || *count < g->nprocs) {
        *count = g->nprocs;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (i = 0; i < g->nprocs; i++) {
        infos[i].pid = g->pids[i];
        infos[i].usedGpuMemory = g->proc_mib[i] << 20;
        infos[i].gpuInstanceId = 0xFFFFFFFFu;
        infos[i].computeInstanceId = 0xFFFFFFFFu;
    }
    *count = g->nprocs;
    return NVML_SUCCESS;
}
