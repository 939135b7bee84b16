/* The struct sizes of an SDK's rknn_api.h as the target's compiler lays them out: `rkdet runner build`
 * compiles this file to assembly (-S, never linked or run, so a cross compiler needs no board) beside
 * rkdet-run-c, with the same compiler, flags and header, and reads each array's `.size` directive.
 * Why: the runtime checks the size of every struct it is handed (ret=-5 when a runner built against
 * another header meets it: rockchip-linux/rknn-toolkit#440), so runner.json records these and preflight
 * compares them with the sizes the board's runtime version expects (rkdet/backends/capi_abi.py).
 * These are the structs rkdet-run-c passes to the runtime. */
#include "rknn_api.h"

#define RKDET_SIZEOF(T) char rkdet_sizeof_##T[sizeof(T)] = {1};
RKDET_SIZEOF(rknn_input_output_num)
RKDET_SIZEOF(rknn_tensor_attr)
RKDET_SIZEOF(rknn_input)
RKDET_SIZEOF(rknn_output)
RKDET_SIZEOF(rknn_sdk_version)
#ifndef RKDET_RKNPU1  /* RKNPU1's API has no custom-string query */
RKDET_SIZEOF(rknn_custom_string)
#endif
