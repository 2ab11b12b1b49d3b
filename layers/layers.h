// Every layer, for convenience.
#pragma once

#include "layers/basic_block.h"
#include "layers/batch_norm.h"
#include "layers/conv2d.h"
#include "layers/dropout.h"
#include "layers/flatten.h"
#include "layers/linear.h"
#include "layers/local_response_norm.h"
#include "layers/loss.h"
#include "layers/module.h"
#include "layers/pooling.h"
#include "layers/relu.h"
#include "layers/sequential.h"
#include "layers/sigmoid.h"
#include "layers/tanh.h"
