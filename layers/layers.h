// Every layer, for convenience.
#pragma once

#include <echelon/layers/basic_block.h>
#include <echelon/layers/batch_norm.h>
#include <echelon/layers/conv2d.h>
#include <echelon/layers/dropout.h>
#include <echelon/layers/flatten.h>
#include <echelon/layers/linear.h>
#include <echelon/layers/local_response_norm.h>
#include <echelon/layers/loss.h>
#include <echelon/layers/module.h>
#include <echelon/layers/pooling.h>
#include <echelon/layers/relu.h>
#include <echelon/layers/sequential.h>
#include <echelon/layers/sigmoid.h>
#include <echelon/layers/tanh.h>
