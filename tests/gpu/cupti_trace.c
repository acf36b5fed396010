/* cupti_trace.c — a GPU timeline of an unmodified run (the device machine has
 * no nsys): a CUPTI activity tracer loaded through the CUDA driver's
 * injection hook.
 *
 *   CUDA_INJECTION64_PATH=build-cuda/libcupti_trace.so LG_CUPTI_FILE=t.txt \
 *     build-cuda/loragate bench ...
 *   python3 tests/gpu/cupti_summary.py t.txt
 *
 * One line per record, times in ns on CUPTI's common clock (host API records
 * and GPU records can be compared):
 *   K start end stream graph grid block smem regs name  a kernel (cuBLAS's too)
 *   M start end stream bytes kind                      a copy or a memset
 *   A start end cbid name                              a runtime or driver call
 *                                                      that may wait or launch
 * Kernels are recorded as CONCURRENT_KERNEL, which does not serialise them.
 * Diagnostic tool for benchmarks; not part of the product. */
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static FILE *trace_out;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *size = (size_t)16 << 20;
    *buffer = aligned_alloc(8, *size);
    *max_records = 0;
}

static const char *api_name(CUpti_CallbackDomain domain, uint32_t cbid)
{
    const char *name = "?";
    cuptiGetCallbackName(domain, cbid, &name);
    return name;
}

/* Host calls worth a line: the ones that wait for the GPU, launch or copy.
 * Everything else (attribute queries, event records) only makes the file
 * longer. */
static int api_kept(const char *name)
{
    static const char *const keep[] = {"Synchronize", "Launch", "Memcpy", "Memset", "Graph", "Malloc", "Free", "Wait"};
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        if (strstr(name, keep[i]))
            return 1;
    return 0;
}

static void write_record(const CUpti_Activity *rec)
{
    switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        fprintf(trace_out, "K %llu %llu %u %u %dx%dx%d %d %d %u %s\n", (unsigned long long)k->start,
                (unsigned long long)k->end, k->streamId, k->graphId, k->gridX, k->gridY, k->gridZ, k->blockX,
                k->staticSharedMemory + k->dynamicSharedMemory, (unsigned)k->registersPerThread, k->name ? k->name : "?");
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
        fprintf(trace_out, "M %llu %llu %u %llu copy%u\n", (unsigned long long)m->start, (unsigned long long)m->end,
                m->streamId, (unsigned long long)m->bytes, (unsigned)m->copyKind);
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
        fprintf(trace_out, "M %llu %llu %u %llu memset\n", (unsigned long long)m->start, (unsigned long long)m->end,
                m->streamId, (unsigned long long)m->bytes);
        break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
        const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)rec;
        const char *name = api_name(
            rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, a->cbid);
        if (api_kept(name))
            fprintf(trace_out, "A %llu %llu %u %s\n", (unsigned long long)a->start, (unsigned long long)a->end,
                    a->cbid, name);
        break;
    }
    default:
        break;
    }
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    (void)ctx;
    (void)stream;
    (void)size;
    CUpti_Activity *rec = NULL;
    while (trace_out && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS)
        write_record(rec);
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped && trace_out)
        fprintf(trace_out, "D %zu\n", dropped);
    free(buffer);
}

static void trace_finish(void)
{
    cuptiActivityFlushAll(1);
    if (trace_out) {
        fclose(trace_out);
        trace_out = NULL;
    }
}

/* Called by the CUDA driver when CUDA_INJECTION64_PATH names this library. */
int InitializeInjection(void)
{
    const char *path = getenv("LG_CUPTI_FILE");
    trace_out = fopen(path && *path ? path : "cupti_trace.txt", "w");
    if (!trace_out) {
        perror("cupti_trace: LG_CUPTI_FILE");
        return 0;
    }
    static const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                               CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME,
                                               CUPTI_ACTIVITY_KIND_DRIVER};
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) {
        fprintf(stderr, "cupti_trace: cuptiActivityRegisterCallbacks failed\n");
        return 0;
    }
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (cuptiActivityEnable(kinds[i]) != CUPTI_SUCCESS)
            fprintf(stderr, "cupti_trace: activity kind %d not enabled\n", (int)kinds[i]);
    atexit(trace_finish);
    return 1;
}
