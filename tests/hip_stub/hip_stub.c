/* A stand-in libamdhip64.so for tests: the HIP entry points rocke's HIP device calls, each
 * forwarding to a Python callback (tests/hip_stub/standin.py fills the table through ctypes and
 * runs launches on rocke's emulator). Device memory is host memory. Built by the test set-up with
 * the system C compiler; never shipped.
 *
 * Only the facts of the HIP C ABI are reproduced here: function signatures, error codes, the
 * HIP_LAUNCH_PARAM_* keys and the hipDeviceProp_tR0600 layout up to gcnArchName. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef int hipError_t;
typedef void *hipHandle;

enum {
    hipSuccess = 0, hipErrorInvalidValue = 1, hipErrorOutOfMemory = 2, hipErrorNotInitialized = 3,
    hipErrorNoDevice = 100, hipErrorInvalidDevice = 101, hipErrorInvalidImage = 200,
    hipErrorNoBinaryForGpu = 209, hipErrorInvalidHandle = 400, hipErrorIllegalState = 401,
    hipErrorNotFound = 500, hipErrorLaunchFailure = 719, hipErrorNotSupported = 801,
    hipErrorStreamCaptureUnsupported = 900, hipErrorStreamCaptureInvalidated = 901,
    hipErrorStreamCaptureUnmatched = 903, hipErrorUnknown = 999,
};

#define HIP_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define HIP_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)
#define HIP_LAUNCH_PARAM_END ((void *)0x03)

/* hipDeviceProp_tR0600 from its first field through gcnArchName (the caller owns the full size) */
typedef struct {
    char name[256];
    char uuid[16];
    char luid[8];
    unsigned int luidDeviceNodeMask;
    size_t totalGlobalMem, sharedMemPerBlock;
    int regsPerBlock, warpSize;
    size_t memPitch;
    int maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3], clockRate;
    size_t totalConstMem;
    int major, minor;
    size_t textureAlignment, texturePitchAlignment;
    int deviceOverlap, multiProcessorCount, kernelExecTimeoutEnabled, integrated, canMapHostMemory,
        computeMode, maxTexture1D, maxTexture1DMipmap, maxTexture1DLinear, maxTexture2D[2],
        maxTexture2DMipmap[2], maxTexture2DLinear[3], maxTexture2DGather[2], maxTexture3D[3],
        maxTexture3DAlt[3], maxTextureCubemap, maxTexture1DLayered[2], maxTexture2DLayered[3],
        maxTextureCubemapLayered[2], maxSurface1D, maxSurface2D[2], maxSurface3D[3],
        maxSurface1DLayered[2], maxSurface2DLayered[3], maxSurfaceCubemap,
        maxSurfaceCubemapLayered[2];
    size_t surfaceAlignment;
    int concurrentKernels, ECCEnabled, pciBusID, pciDeviceID, pciDomainID, tccDriver,
        asyncEngineCount, unifiedAddressing, memoryClockRate, memoryBusWidth, l2CacheSize,
        persistingL2CacheMaxSize, maxThreadsPerMultiProcessor, streamPrioritiesSupported,
        globalL1CacheSupported, localL1CacheSupported;
    size_t sharedMemPerMultiprocessor;
    int regsPerMultiprocessor, managedMemory, isMultiGpuBoard, multiGpuBoardGroupID,
        hostNativeAtomicSupported, singleToDoublePrecisionPerfRatio, pageableMemoryAccess,
        concurrentManagedAccess, computePreemptionSupported, canUseHostPointerForRegisteredMem,
        cooperativeLaunch, cooperativeMultiDeviceLaunch;
    size_t sharedMemPerBlockOptin;
    int pageableMemoryAccessUsesHostPageTables, directManagedMemAccessFromHost,
        maxBlocksPerMultiProcessor, accessPolicyMaxWindowSize;
    size_t reservedSharedMemPerBlock;
    int hostRegisterSupported, sparseHipArraySupported, hostRegisterReadOnlySupported,
        timelineSemaphoreInteropSupported, memoryPoolsSupported, gpuDirectRDMASupported;
    unsigned int gpuDirectRDMAFlushWritesOptions;
    int gpuDirectRDMAWritesOrdering;
    unsigned int memoryPoolSupportedHandleTypes;
    int deferredMappingHipArraySupported, ipcEventSupported, clusterLaunch,
        unifiedFunctionPointers, reserved[63], hipReserved[32];
    char gcnArchName[256];
} StandInDeviceProp;

/* ---- the callback table (Python fills it with hip_stub_set) ---- */
typedef hipError_t (*cb_count_t)(int *);
typedef hipError_t (*cb_props_t)(int, char *, char *, int *, size_t *);
typedef hipError_t (*cb_malloc_t)(void **, size_t);
typedef hipError_t (*cb_ptr_t)(void *);
typedef hipError_t (*cb_memcpy_t)(void *, const void *, size_t, int);
typedef hipError_t (*cb_load_t)(void **, const void *);
typedef hipError_t (*cb_getfn_t)(void **, void *, const char *);
typedef hipError_t (*cb_launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  unsigned, unsigned, void *, const void *, size_t);
typedef hipError_t (*cb_out_t)(void **);
typedef hipError_t (*cb_ptr_int_t)(void *, int);
typedef hipError_t (*cb_ptr_out_t)(void *, void **);
typedef hipError_t (*cb_ptr_intout_t)(void *, int *);
typedef hipError_t (*cb_two_t)(void *, void *);
typedef hipError_t (*cb_elapsed_t)(float *, void *, void *);

static struct {
    cb_count_t device_count;
    cb_props_t device_props;
    cb_malloc_t malloc_;
    cb_ptr_t free_;
    cb_memcpy_t memcpy_;
    cb_load_t module_load;
    cb_ptr_t module_unload;
    cb_getfn_t get_function;
    cb_launch_t launch;
    cb_out_t stream_create;
    cb_ptr_t stream_destroy;
    cb_ptr_t stream_sync;
    cb_ptr_int_t begin_capture;
    cb_ptr_out_t end_capture;
    cb_ptr_intout_t is_capturing;
    cb_ptr_out_t graph_instantiate;   /* (graph, &exec) */
    cb_two_t graph_launch;            /* (exec, stream) */
    cb_ptr_t graph_destroy;
    cb_ptr_t graph_exec_destroy;
    cb_out_t event_create;
    cb_ptr_t event_destroy;
    cb_two_t event_record;            /* (event, stream) */
    cb_ptr_t event_sync;
    cb_elapsed_t event_elapsed;
} cb;

static int current_device = 0;

int hip_stub_set(const char *name, void *fn) {
#define SLOT(n) if (strcmp(name, #n) == 0) { memcpy(&cb.n, &fn, sizeof fn); return 0; }
    SLOT(device_count) SLOT(device_props) SLOT(malloc_) SLOT(free_) SLOT(memcpy_)
    SLOT(module_load) SLOT(module_unload) SLOT(get_function) SLOT(launch) SLOT(stream_create)
    SLOT(stream_destroy) SLOT(stream_sync) SLOT(begin_capture) SLOT(end_capture)
    SLOT(is_capturing) SLOT(graph_instantiate) SLOT(graph_launch) SLOT(graph_destroy)
    SLOT(graph_exec_destroy) SLOT(event_create) SLOT(event_destroy) SLOT(event_record)
    SLOT(event_sync) SLOT(event_elapsed)
#undef SLOT
    return -1;
}

#define FORWARD(slot, ...) return cb.slot ? cb.slot(__VA_ARGS__) : hipErrorNotInitialized

/* ---- error strings ---- */
static const struct { int code; const char *name, *text; } ERRORS[] = {
    {hipSuccess, "hipSuccess", "no error"},
    {hipErrorInvalidValue, "hipErrorInvalidValue", "invalid argument"},
    {hipErrorOutOfMemory, "hipErrorOutOfMemory", "out of memory"},
    {hipErrorNotInitialized, "hipErrorNotInitialized", "initialization error"},
    {hipErrorNoDevice, "hipErrorNoDevice", "no ROCm-capable device is detected"},
    {hipErrorInvalidDevice, "hipErrorInvalidDevice", "invalid device ordinal"},
    {hipErrorInvalidImage, "hipErrorInvalidImage", "device kernel image is invalid"},
    {hipErrorNoBinaryForGpu, "hipErrorNoBinaryForGpu",
     "no kernel image is available for execution on the device"},
    {hipErrorInvalidHandle, "hipErrorInvalidHandle", "invalid resource handle"},
    {hipErrorIllegalState, "hipErrorIllegalState", "the operation is not permitted in this state"},
    {hipErrorNotFound, "hipErrorNotFound", "named symbol not found"},
    {hipErrorLaunchFailure, "hipErrorLaunchFailure", "unspecified launch failure"},
    {hipErrorNotSupported, "hipErrorNotSupported", "operation not supported"},
    {hipErrorStreamCaptureUnsupported, "hipErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {hipErrorStreamCaptureInvalidated, "hipErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {hipErrorStreamCaptureUnmatched, "hipErrorStreamCaptureUnmatched",
     "capture was not ended in the same stream as it began"},
    {hipErrorUnknown, "hipErrorUnknown", "unknown error"},
};

const char *hipGetErrorString(hipError_t e) {
    for (size_t i = 0; i < sizeof ERRORS / sizeof ERRORS[0]; i++)
        if (ERRORS[i].code == e) return ERRORS[i].text;
    return "unrecognized error code";
}

const char *hipGetErrorName(hipError_t e) {
    for (size_t i = 0; i < sizeof ERRORS / sizeof ERRORS[0]; i++)
        if (ERRORS[i].code == e) return ERRORS[i].name;
    return "hipErrorUnknown";
}

/* ---- device ---- */
hipError_t hipInit(unsigned int flags) { (void)flags; return hipSuccess; }
hipError_t hipDriverGetVersion(int *v) { *v = 60241134; return hipSuccess; }
hipError_t hipRuntimeGetVersion(int *v) { *v = 60241134; return hipSuccess; }
hipError_t hipGetDeviceCount(int *count) { FORWARD(device_count, count); }

hipError_t hipSetDevice(int device) {
    int count = 0;
    hipError_t e = hipGetDeviceCount(&count);
    if (e != hipSuccess) return e;
    if (device < 0 || device >= count) return hipErrorInvalidDevice;
    current_device = device;
    return hipSuccess;
}

hipError_t hipGetDevice(int *device) { *device = current_device; return hipSuccess; }

hipError_t hipGetDevicePropertiesR0600(StandInDeviceProp *prop, int device) {
    if (!prop) return hipErrorInvalidValue;
    if (!cb.device_props) return hipErrorNotInitialized;
    memset(prop, 0, sizeof *prop);
    int cus = 0;
    size_t mem = 0;
    hipError_t e = cb.device_props(device, prop->gcnArchName, prop->name, &cus, &mem);
    if (e != hipSuccess) return e;
    prop->multiProcessorCount = cus;
    prop->totalGlobalMem = mem;
    prop->warpSize = 64;
    prop->maxThreadsPerBlock = 1024;
    prop->major = 9;
    prop->minor = 4;
    prop->sharedMemPerBlock = 65536;
    return hipSuccess;
}

hipError_t hipDeviceSynchronize(void) { return hipSuccess; }   /* launches run synchronously */

/* ---- memory ---- */
hipError_t hipMalloc(void **ptr, size_t size) { FORWARD(malloc_, ptr, size); }
hipError_t hipFree(void *ptr) { FORWARD(free_, ptr); }
hipError_t hipMemcpy(void *dst, const void *src, size_t size, int kind) {
    FORWARD(memcpy_, dst, src, size, kind);
}
hipError_t hipMemcpyAsync(void *dst, const void *src, size_t size, int kind, hipHandle stream) {
    (void)stream;
    FORWARD(memcpy_, dst, src, size, kind);
}

/* ---- modules and launches ---- */
hipError_t hipModuleLoadData(hipHandle *module, const void *image) {
    FORWARD(module_load, module, image);
}
hipError_t hipModuleUnload(hipHandle module) { FORWARD(module_unload, module); }
hipError_t hipModuleGetFunction(hipHandle *function, hipHandle module, const char *name) {
    FORWARD(get_function, function, module, name);
}

hipError_t hipModuleLaunchKernel(hipHandle f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned shared, hipHandle stream,
                                 void **kernelParams, void **extra) {
    const void *buffer = NULL;
    size_t size = 0;
    int have_size = 0;
    if (kernelParams) return hipErrorNotSupported;   /* rocke passes the packed buffer in extra */
    if (!extra) return hipErrorInvalidValue;
    for (size_t i = 0; extra[i] != HIP_LAUNCH_PARAM_END; i += 2) {
        if (i > 64) return hipErrorInvalidValue;      /* no END marker */
        if (extra[i] == HIP_LAUNCH_PARAM_BUFFER_POINTER) buffer = extra[i + 1];
        else if (extra[i] == HIP_LAUNCH_PARAM_BUFFER_SIZE) {
            if (!extra[i + 1]) return hipErrorInvalidValue;
            size = *(const size_t *)extra[i + 1];
            have_size = 1;
        } else return hipErrorInvalidValue;
    }
    if (!buffer || !have_size) return hipErrorInvalidValue;
    FORWARD(launch, f, gx, gy, gz, bx, by, bz, shared, stream, buffer, size);
}

/* ---- streams, capture, graphs, events ---- */
hipError_t hipStreamCreate(hipHandle *stream) { FORWARD(stream_create, stream); }
hipError_t hipStreamCreateWithFlags(hipHandle *stream, unsigned flags) {
    (void)flags;
    FORWARD(stream_create, stream);
}
hipError_t hipStreamDestroy(hipHandle stream) { FORWARD(stream_destroy, stream); }
hipError_t hipStreamSynchronize(hipHandle stream) { FORWARD(stream_sync, stream); }
hipError_t hipStreamBeginCapture(hipHandle stream, int mode) {
    FORWARD(begin_capture, stream, mode);
}
hipError_t hipStreamEndCapture(hipHandle stream, hipHandle *graph) {
    FORWARD(end_capture, stream, graph);
}
/* Each stream's capture state, as a runtime keeps it: hipStreamIsCapturing answers from here in
 * C, without a call into Python (the Python half reports every stream's creation, capture begin
 * and end, and destruction through hip_stub_stream_state). A stream not in the table (none
 * free) is answered by the Python half, as every call was before. */
#define STREAM_SLOTS 256
static struct { hipHandle handle; int capturing; } stream_states[STREAM_SLOTS];

/* state: 0 idle, 1 capturing, -1 destroyed; a NULL stream with -1 forgets every stream */
int hip_stub_stream_state(hipHandle stream, int state) {
    size_t free_slot = STREAM_SLOTS;
    if (stream == NULL) {
        if (state >= 0) return -1;
        memset(stream_states, 0, sizeof stream_states);
        return 0;
    }
    for (size_t i = 0; i < STREAM_SLOTS; i++) {
        if (stream_states[i].handle == stream) {
            if (state < 0) stream_states[i].handle = NULL;
            else stream_states[i].capturing = state;
            return 0;
        }
        if (stream_states[i].handle == NULL && free_slot == STREAM_SLOTS) free_slot = i;
    }
    if (state < 0) return 0;
    if (free_slot == STREAM_SLOTS) return -1;     /* table full: the Python half answers */
    stream_states[free_slot].capturing = state;
    stream_states[free_slot].handle = stream;
    return 0;
}

hipError_t hipStreamIsCapturing(hipHandle stream, int *status) {
    if (status && stream == NULL) {     /* the null stream: never capturing here */
        *status = 0;
        return hipSuccess;
    }
    for (size_t i = 0; status && i < STREAM_SLOTS; i++)
        if (stream_states[i].handle == stream) {
            *status = stream_states[i].capturing;
            return hipSuccess;
        }
    FORWARD(is_capturing, stream, status);
}
hipError_t hipGraphInstantiate(hipHandle *exec, hipHandle graph, hipHandle *error_node,
                               char *log, size_t log_size) {
    (void)log; (void)log_size;
    if (error_node) *error_node = NULL;
    FORWARD(graph_instantiate, graph, exec);
}
hipError_t hipGraphLaunch(hipHandle exec, hipHandle stream) { FORWARD(graph_launch, exec, stream); }
hipError_t hipGraphDestroy(hipHandle graph) { FORWARD(graph_destroy, graph); }
hipError_t hipGraphExecDestroy(hipHandle exec) { FORWARD(graph_exec_destroy, exec); }
hipError_t hipEventCreate(hipHandle *event) { FORWARD(event_create, event); }
hipError_t hipEventCreateWithFlags(hipHandle *event, unsigned flags) {
    (void)flags;
    FORWARD(event_create, event);
}
hipError_t hipEventDestroy(hipHandle event) { FORWARD(event_destroy, event); }
hipError_t hipEventRecord(hipHandle event, hipHandle stream) {
    FORWARD(event_record, event, stream);
}
hipError_t hipEventSynchronize(hipHandle event) { FORWARD(event_sync, event); }
hipError_t hipEventElapsedTime(float *ms, hipHandle start, hipHandle stop) {
    FORWARD(event_elapsed, ms, start, stop);
}
