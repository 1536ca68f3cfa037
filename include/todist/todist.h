/* todist/todist.h: the umbrella header. Include this; link -ltodist
 * (pkg-config --cflags --libs todist). */
#ifndef TODIST_TODIST_H
#define TODIST_TODIST_H

#include <todist/status.h>
#include <todist/world.h>
#include <todist/rank_env.h>
#include <todist/topology.h>
#include <todist/tensor.h>
#include <todist/device.h>
#include <todist/autograd.h>
#include <todist/store.h>
#include <todist/ops.h>
#include <todist/rpc.h>
#include <todist/rref.h>
#include <todist/mapreduce.h>
#include <todist/coll.h>
#include <todist/init.h>
#include <todist/optim.h>
#include <todist/nn.h>
#include <todist/batchnorm.h>
#include <todist/data.h>
#include <todist/safetensors.h>
#include <todist/slurm_env.h>

#include <todist/dist_autograd.h>
#include <todist/dist_optim.h>
#include <todist/dist_optim_remote.h>
#include <todist/sampler.h>
#include <todist/ddp.h>
#include <todist/syncbn.h>
#include <todist/join.h>
#include <todist/zero.h>
#include <todist/remote_module.h>
#include <todist/pipe.h>
#include <todist/checkpoint.h>
#include <todist/elastic.h>

#endif /* TODIST_TODIST_H */
