"""The memory model: what each GPU holds, term by term, and when.

shapes.py             Setup (model, cluster, training) and the per-layer shapes the formulas read
stages.py             a pipeline rank: its layers, kinds, embedding and head, parameters, shard group
states.py             weights, gradients and optimizer states under ZeRO 0-3 (Rajbhandari et al.)
copies.py             weight and gradient copies beyond the sharded states: quantized caches, gathered
                      ZeRO-3 weights, pipelined ZeRO-2/3 accumulation, optimizer-in-backward, paged pages
activations.py        one layer's stored activations per recompute mode (Korthikanti et al.), the loss
stage_activations.py  a stage's layers, the micro-batches in flight, partial full recompute
hybrid_memory.py      hybrid (Mamba) stages kind by kind
finetune.py           LoRA and QLoRA: frozen bases, adapters, dequantization
offload.py            optimizer and activation offload to host memory and NVMe
runtime.py            the runtime's buffers: CUDA context, BLAS workspace, NCCL, DeepEP, FSDP, the allocator
timeline.py           the moments of a step and the peak among them
bound.py              the lower bound every configuration's memory is above (the no-fit proof)
breakdown.py          the assembler: stage_memory (RAW or Trace), evaluate, the busiest stage
"""
