/* rkdet's OWN declarations of the RKNN C API ABI, for TESTS ONLY (the test double beside this file
 * and the test build of rkdet-run-c). This is not Rockchip's header and holds none of its text: it
 * declares, from the documented struct layouts and function signatures of the RKNN Runtime C API
 * (RKNN API user guide, toolkit2 1.x/2.x), only what rkdet-run-c and the double use. A real build of
 * rkdet-run-c compiles against the rknn_api.h in the user's own SDK (`rkdet runner build --sdk DIR`).
 * RKDET_RKNPU1 declares RKNPU1's variant (`rkdet runner build` defines it for rkdet's code when the SDK
 * holds librknn_api.so, RKNPU1's library, instead of librknnrt.so).
 * RKDET_TEST_ABI marks a build against this file (the runner then names itself a test build).
 */
#ifndef RKDET_TEST_RKNN_API_H
#define RKDET_TEST_RKNN_API_H
#include <stdint.h>
#define RKDET_TEST_ABI 1

#define RKNN_SUCC 0
#define RKNN_ERR_FAIL -1
#define RKNN_ERR_TIMEOUT -2
#define RKNN_ERR_DEVICE_UNAVAILABLE -3
#define RKNN_ERR_MALLOC_FAIL -4
#define RKNN_ERR_PARAM_INVALID -5
#define RKNN_ERR_MODEL_INVALID -6
#define RKNN_ERR_CTX_INVALID -7
#define RKNN_ERR_INPUT_INVALID -8
#define RKNN_ERR_OUTPUT_INVALID -9

#define RKNN_MAX_DIMS 16
#define RKNN_MAX_NAME_LEN 256

#if defined(__arm__) && !defined(__aarch64__)
typedef uint32_t rknn_context;
#else
typedef uint64_t rknn_context;
#endif

typedef enum { RKNN_QUERY_IN_OUT_NUM = 0, RKNN_QUERY_INPUT_ATTR = 1, RKNN_QUERY_OUTPUT_ATTR = 2,
               RKNN_QUERY_PERF_DETAIL = 3, RKNN_QUERY_PERF_RUN = 4, RKNN_QUERY_SDK_VERSION = 5,
               RKNN_QUERY_MEM_SIZE = 6, RKNN_QUERY_CUSTOM_STRING = 7 } rknn_query_cmd;

typedef enum { RKNN_TENSOR_FLOAT32 = 0, RKNN_TENSOR_FLOAT16, RKNN_TENSOR_INT8, RKNN_TENSOR_UINT8,
               RKNN_TENSOR_INT16, RKNN_TENSOR_UINT16, RKNN_TENSOR_INT32, RKNN_TENSOR_UINT32,
               RKNN_TENSOR_INT64, RKNN_TENSOR_BOOL, RKNN_TENSOR_INT4, RKNN_TENSOR_BFLOAT16,
               RKNN_TENSOR_TYPE_MAX } rknn_tensor_type;

typedef enum { RKNN_TENSOR_QNT_NONE = 0, RKNN_TENSOR_QNT_DFP, RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC,
               RKNN_TENSOR_QNT_MAX } rknn_tensor_qnt_type;

typedef enum { RKNN_TENSOR_NCHW = 0, RKNN_TENSOR_NHWC, RKNN_TENSOR_NC1HWC2, RKNN_TENSOR_UNDEFINED,
               RKNN_TENSOR_FORMAT_MAX } rknn_tensor_format;

#ifndef RKDET_RKNPU1
typedef enum { RKNN_NPU_CORE_AUTO = 0, RKNN_NPU_CORE_0 = 1, RKNN_NPU_CORE_1 = 2, RKNN_NPU_CORE_2 = 4,
               RKNN_NPU_CORE_0_1 = 3, RKNN_NPU_CORE_0_1_2 = 7, RKNN_NPU_CORE_ALL = 0xffff,
               RKNN_NPU_CORE_UNDEFINED } rknn_core_mask;
#endif

typedef struct { uint32_t n_input; uint32_t n_output; } rknn_input_output_num;

typedef struct {
    uint32_t index;
    uint32_t n_dims;
    uint32_t dims[RKNN_MAX_DIMS];
    char name[RKNN_MAX_NAME_LEN];
    uint32_t n_elems;
    uint32_t size;
    rknn_tensor_format fmt;
    rknn_tensor_type type;
    rknn_tensor_qnt_type qnt_type;
    int8_t fl;
    int32_t zp;
    float scale;
#ifndef RKDET_RKNPU1  /* RKNPU1's tensor attributes end at scale (360 bytes, as its published headers) */
    uint32_t w_stride;
    uint32_t size_with_stride;
    uint8_t pass_through;
    uint32_t h_stride;
#endif
#ifdef RKDET_TEST_ABI_GROWN
    uint32_t rkdet_test_grown[4];  /* a "newer header": another struct size, for the ret=-5 test */
#endif
} rknn_tensor_attr;

typedef struct { char api_version[256]; char drv_version[256]; } rknn_sdk_version;
typedef struct { char string[1024]; } rknn_custom_string;

typedef struct {
    uint32_t index;
    void *buf;
    uint32_t size;
    uint8_t pass_through;
    rknn_tensor_type type;
    rknn_tensor_format fmt;
} rknn_input;

typedef struct {
    uint8_t want_float;
    uint8_t is_prealloc;
    uint32_t index;
    void *buf;
    uint32_t size;
} rknn_output;

typedef struct rknn_init_extend rknn_init_extend;  /* opaque here: rkdet-run-c passes NULL */
typedef struct rknn_run_extend rknn_run_extend;
typedef struct rknn_output_extend rknn_output_extend;

#ifdef RKDET_RKNPU1  /* RKNPU1 (RV1126/RV1109, librknn_api.so): 4-argument init, no core mask */
int rknn_init(rknn_context *context, void *model, uint32_t size, uint32_t flag);
#else
int rknn_init(rknn_context *context, void *model, uint32_t size, uint32_t flag, rknn_init_extend *extend);
#endif
int rknn_destroy(rknn_context context);
int rknn_query(rknn_context context, rknn_query_cmd cmd, void *info, uint32_t size);
int rknn_inputs_set(rknn_context context, uint32_t n_inputs, rknn_input inputs[]);
int rknn_run(rknn_context context, rknn_run_extend *extend);
int rknn_outputs_get(rknn_context context, uint32_t n_outputs, rknn_output outputs[], rknn_output_extend *extend);
int rknn_outputs_release(rknn_context context, uint32_t n_outputs, rknn_output outputs[]);
#ifndef RKDET_RKNPU1
int rknn_set_core_mask(rknn_context context, rknn_core_mask core_mask);
#endif
#endif
