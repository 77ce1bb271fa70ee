# End-to-end tests of zero-train (apps/), run through zero-run on 2 ranks.
if(TARGET zero-train)
  set(ZERO_RUN_SCRIPT ${PROJECT_BINARY_DIR}/bin/zero-run)
  # Configurations from train/stage.json.in: NAME STAGE PRECISION_JSON. The stage runs train
  # in fp32, which every CPU computes fast; 16-bit compute is covered by
  # zero_train_bf16_on_slow_cpu (a few steps: on an AVX2-only CPU bf16 GEMMs are 10-45x
  # slower) and stage 3's fp32 compute from bf16 shards (Note [Compute dtype]) by the curve
  # runs below.
  set(bf16 "  \"bf16\": {\"enabled\": true},\n")
  set(ZERO_TRAIN_RUNS
      "stage0|0|" "stage1|1|" "stage2|2|" "stage3|3|"
      "bf16|2|${bf16}" "auto|2|${bf16}  \"compute_data_type\": \"auto\",\n")
  foreach(run IN LISTS ZERO_TRAIN_RUNS)
    string(REPLACE "|" ";" fields "${run}")
    list(GET fields 0 name)
    list(GET fields 1 STAGE)
    list(GET fields 2 PRECISION)
    # Stage 3: partition every parameter inside a unit (gpt2-tiny's are all below the default
    # threshold, which would leave them whole), so the blocks are really gathered and released.
    if(STAGE EQUAL 3)
      # The stage-3 run also keeps its optimizer state and its unit parameter shards on NVMe
      # (Note [NVMe offload], Note [Parameter offload]), in swap files under the build tree,
      # the optimizer's in tiles of 20000 elements (several per rank), the parameters through
      # 3 slots: bitwise the in-memory run, so zero_train_stage3_matches_stage2 below holds as
      # before, and the start-up estimate and the summary's placement rows are checked end to
      # end.
      # It checkpoints 3 of gpt2-tiny's 4 blocks too (activation_checkpointing, with its
      # profile in the summary): the recompute gathers those units again during backward.
      set(TOP_EXTRA ",\n  \"activation_checkpointing\": {\"number_checkpoints\": 3, \"profile\": true}")
      set(STAGE_EXTRA ", \"stage3_param_persistence_threshold\": 0, \"sub_group_size\": 20000, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"${CMAKE_CURRENT_BINARY_DIR}/train\"}, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"${CMAKE_CURRENT_BINARY_DIR}/train\", \"buffer_count\": 3}")
    else()
      set(STAGE_EXTRA "")
      set(TOP_EXTRA "")
    endif()
    configure_file(${CMAKE_CURRENT_SOURCE_DIR}/train/stage.json.in
                   ${CMAKE_CURRENT_BINARY_DIR}/train/${name}.json @ONLY)
  endforeach()
  # Stage 3 in fp32, and computing in fp32 from bf16 shards, on a gentle schedule (warm-up,
  # lr 1e-3), so the comparison below measures precision, not the chaos of an aggressive one.
  foreach(name curve-fp32 curve-fp32-compute)
    if(name STREQUAL "curve-fp32")
      set(PRECISION "")
    else()
      set(PRECISION "${bf16}  \"compute_data_type\": \"fp32\",\n")
    endif()
    configure_file(${CMAKE_CURRENT_SOURCE_DIR}/train/curve.json.in
                   ${CMAKE_CURRENT_BINARY_DIR}/train/${name}.json @ONLY)
  endforeach()
  foreach(name stage0 stage1 stage2 stage3 curve-fp32 curve-fp32-compute)
    string(REPLACE "-" "_" test ${name})
    if(name MATCHES "^curve")
      set(steps 30)
    else()
      set(steps 20)
    endif()
    set(expected_lines "")
    if(name STREQUAL "stage3")
      set(expected_lines --expect-line "iB on NVMe" --expect-line "    on NVMe"
                         --expect-line "unit param shards, fp32 master"
                         --expect-line "activation checkpointing: 3 of 4 blocks"
                         --expect-line "  their recomputes")
    endif()
    add_test(NAME zero_train_${test}
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/check_train.sh $<TARGET_FILE:zero-train>
                     ${ZERO_RUN_SCRIPT} ${CMAKE_CURRENT_BINARY_DIR}/train/${name}.json
                     ${CMAKE_CURRENT_BINARY_DIR}/train/run-${name} ${steps} --expect-formula
                     ${expected_lines})
    set_tests_properties(zero_train_${test} PROPERTIES TIMEOUT 600)
  endforeach()
  # Stage 3 trains like stage 2 from the same seed: the per-step losses of the two runs above
  # agree (bitwise without clipping at 2 ranks; here the clipping norm is summed in another
  # order, which may perturb the last bits).
  set_tests_properties(zero_train_stage2 zero_train_stage3 PROPERTIES
                       FIXTURES_SETUP zero_train_stage2_and_3)
  add_test(NAME zero_train_stage3_matches_stage2
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/compare_losses.sh
                   ${CMAKE_CURRENT_BINARY_DIR}/train/run-stage2/metrics.csv
                   ${CMAKE_CURRENT_BINARY_DIR}/train/run-stage3/metrics.csv 1e-4)
  set_tests_properties(zero_train_stage3_matches_stage2 PROPERTIES
                       FIXTURES_REQUIRED zero_train_stage2_and_3)
  # The example configs of the other optimizers (configs/adagrad.json, lion.json, lamb.json,
  # muon.json, at
  # stage 2) train, in fp32 (their bf16 section taken out: "auto" would measure the GEMMs and
  # might compute the two runs in different dtypes), with the summary's memory figures equal
  # to the formula for their state, and the same config at stage 3 gives the same per-step
  # losses (clipping's norm, summed in another order, may perturb the last bits).
  foreach(optimizer adagrad lion lamb muon)
    file(READ ${PROJECT_SOURCE_DIR}/configs/${optimizer}.json example)
    string(REPLACE "  \"bf16\": {\"enabled\": true},\n" "" example "${example}")
    file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/train/${optimizer}.json "${example}")
    string(REPLACE "\"stage\": 2" "\"stage\": 3, \"stage3_param_persistence_threshold\": 0"
           example_stage3 "${example}")
    file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/train/${optimizer}-stage3.json "${example_stage3}")
    foreach(variant ${optimizer} ${optimizer}-stage3)
      set(config ${CMAKE_CURRENT_BINARY_DIR}/train/${variant}.json)
      string(REPLACE "-" "_" test ${variant})
      add_test(NAME zero_train_${test}
               COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/check_train.sh $<TARGET_FILE:zero-train>
                       ${ZERO_RUN_SCRIPT} ${config} ${CMAKE_CURRENT_BINARY_DIR}/train/run-${variant}
                       20 --expect-formula)
      set_tests_properties(zero_train_${test} PROPERTIES TIMEOUT 600
                           FIXTURES_SETUP zero_train_${optimizer}_stages)
    endforeach()
    add_test(NAME zero_train_${optimizer}_stage3_matches_stage2
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/compare_losses.sh
                     ${CMAKE_CURRENT_BINARY_DIR}/train/run-${optimizer}/metrics.csv
                     ${CMAKE_CURRENT_BINARY_DIR}/train/run-${optimizer}-stage3/metrics.csv 1e-4)
    set_tests_properties(zero_train_${optimizer}_stage3_matches_stage2 PROPERTIES
                         FIXTURES_REQUIRED zero_train_${optimizer}_stages)
  endforeach()
  # Stage 3 computing in fp32 from bf16 shards (bf16 in memory and on the wire) follows the
  # fp32 run's loss curve. Not bitwise: the weights it computes with are the bf16 roundings
  # of the fp32 master weights (2e-6 relative at step 1, about 5e-4 after 40 steps here;
  # docs/config.md). Equality with a reference computing on the same rounded weights, within
  # 1e-5, is test_compute_dtype's.
  set_tests_properties(zero_train_curve_fp32 zero_train_curve_fp32_compute PROPERTIES
                       FIXTURES_SETUP zero_train_curves)
  add_test(NAME zero_train_stage3_fp32_compute_matches_fp32
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/compare_losses.sh
                   ${CMAKE_CURRENT_BINARY_DIR}/train/run-curve-fp32/metrics.csv
                   ${CMAKE_CURRENT_BINARY_DIR}/train/run-curve-fp32-compute/metrics.csv 1e-2)
  set_tests_properties(zero_train_stage3_fp32_compute_matches_fp32 PROPERTIES
                       FIXTURES_REQUIRED zero_train_curves)
  # bf16 compute, on a CPU that says (ZERO_GEMM_RATES) its bf16 GEMMs are 10x slower than
  # fp32: it trains as configured, with the one-line warning naming the slowdown and the key
  # to change. And compute_data_type "auto" there: fp32 at stage 2, saying so.
  set(slow16 "OPENBLAS_CORETYPE=;ZERO_GEMM_RATES=fp32=80,bf16=8,fp16=8")
  add_test(NAME zero_train_bf16_on_slow_cpu
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/check_train.sh $<TARGET_FILE:zero-train>
                   ${ZERO_RUN_SCRIPT} ${CMAKE_CURRENT_BINARY_DIR}/train/bf16.json
                   ${CMAKE_CURRENT_BINARY_DIR}/train/run-bf16 6 --expect-formula
                   --expect-line "zero: warning: bf16 GEMMs run 10.0x slower than fp32 on this CPU"
                   --expect-line "training computes in bf16 as configured")
  add_test(NAME zero_train_auto_on_slow_cpu
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/check_train.sh $<TARGET_FILE:zero-train>
                   ${ZERO_RUN_SCRIPT} ${CMAKE_CURRENT_BINARY_DIR}/train/auto.json
                   ${CMAKE_CURRENT_BINARY_DIR}/train/run-auto 20 --expect-formula
                   --expect-line "zero: compute_data_type \"auto\": bf16 GEMMs run 10.0x slower"
                   --expect-line "computing in fp32 (stages 0-2 compute with the parameters"
                   --expect-line "compute dtype")
  set_tests_properties(zero_train_bf16_on_slow_cpu zero_train_auto_on_slow_cpu PROPERTIES
                       TIMEOUT 600 ENVIRONMENT "${slow16}")
  # DeepSpeed's own example config (fp16 compute, as DeepSpeed does) runs unmodified: 3 steps
  # (fp16 GEMMs are slow on CPUs without AVX-512 FP16: 8 s a step of gpt2-tiny on a Zen 4).
  add_test(NAME zero_train_deepspeed_example
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/check_train.sh $<TARGET_FILE:zero-train>
                   ${ZERO_RUN_SCRIPT} ${CMAKE_CURRENT_SOURCE_DIR}/train/deepspeed_example.json
                   ${CMAKE_CURRENT_BINARY_DIR}/train/run-deepspeed 3 --runs-only)
  add_test(NAME zero_train_bad_inputs
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/check_bad_inputs.sh $<TARGET_FILE:zero-train>
                   ${ZERO_RUN_SCRIPT} ${CMAKE_CURRENT_BINARY_DIR}/train/bad-inputs)
  # The memory plan against every rank's peak resident set, within 5 %, for the whole run
  # (evaluation and samples included): the demo's config, fp32 at stage 3, NVMe offload.
  add_test(NAME zero_train_plan_vs_rss
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/check_plan_vs_rss.sh $<TARGET_FILE:zero-train>
                   ${ZERO_RUN_SCRIPT} ${CMAKE_CURRENT_BINARY_DIR}/train/plan-vs-rss)
  set_tests_properties(zero_train_plan_vs_rss PROPERTIES TIMEOUT 900)
  add_test(NAME zero_train_disk_full
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/check_disk_full.sh $<TARGET_FILE:zero-train>
                   ${ZERO_RUN_SCRIPT} ${CMAKE_CURRENT_BINARY_DIR}/train/disk-full)
  # The shapes real DeepSpeed configs come in (Hugging Face "auto", no optimizer, keys that
  # change nothing, refused features): trained 3 steps or refused in one line. On a CPU with
  # slow 16-bit GEMMs (ZERO_GEMM_RATES), so "auto" precision is fp32 anywhere.
  add_test(NAME zero_train_config_shapes
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/check_config_shapes.sh $<TARGET_FILE:zero-train>
                   ${ZERO_RUN_SCRIPT} ${CMAKE_CURRENT_BINARY_DIR}/train/config-shapes)
  set_tests_properties(zero_train_config_shapes PROPERTIES TIMEOUT 600
                       ENVIRONMENT "ZERO_GEMM_RATES=fp32=80,bf16=8,fp16=8")
  add_test(NAME zero_train_interrupt
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/check_interrupt.sh $<TARGET_FILE:zero-train>
                   ${ZERO_RUN_SCRIPT} ${CMAKE_CURRENT_BINARY_DIR}/train/stage2.json
                   ${CMAKE_CURRENT_BINARY_DIR}/train/run-interrupt)
  add_test(NAME zero_train_collective_timeout
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/check_collective_timeout.sh
                   $<TARGET_FILE:zero-train> ${ZERO_RUN_SCRIPT}
                   ${CMAKE_CURRENT_BINARY_DIR}/train/stage2.json
                   ${CMAKE_CURRENT_BINARY_DIR}/train/run-collective-timeout)
  set_tests_properties(zero_train_collective_timeout PROPERTIES TIMEOUT 300)
  set_tests_properties(zero_train_deepspeed_example zero_train_bad_inputs zero_train_disk_full
                       zero_train_interrupt
                       PROPERTIES TIMEOUT 900)
  # Resuming from a checkpoint (--save-every, --resume) at stages 2 and 3 gives bitwise the
  # metrics of an uninterrupted run, in fp16 with dynamic loss scaling, a scheduler, gradient
  # accumulation, clipping and dropout. resume.json.in's initial loss scale 2^18 overflows at
  # steps 1, 2, 5 and 6 (hysteresis, then halving), so skipped steps, the scaler's state and
  # the schedule position (it advances on applied steps only) all cross the resume. Stage 3
  # computes in fp32 from its fp16 shards (Note [Compute dtype]; fp16 compute is 10-45x
  # slower on AVX2-only CPUs), so its resume also covers that engine's state.
  foreach(stage 2 3)
    set(STAGE ${stage})
    if(stage EQUAL 3)
      set(STAGE_EXTRA ", \"stage3_param_persistence_threshold\": 0")
      set(COMPUTE "\"compute_data_type\": \"fp32\",\n  ")
    else()
      set(STAGE_EXTRA "")
      set(COMPUTE "")
    endif()
    configure_file(${CMAKE_CURRENT_SOURCE_DIR}/train/resume.json.in
                   ${CMAKE_CURRENT_BINARY_DIR}/train/resume-stage${stage}.json @ONLY)
    add_test(NAME zero_train_resume_stage${stage}
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/check_resume.sh $<TARGET_FILE:zero-train>
                     ${ZERO_RUN_SCRIPT} ${CMAKE_CURRENT_BINARY_DIR}/train/resume-stage${stage}.json
                     ${CMAKE_CURRENT_BINARY_DIR}/train/run-resume-stage${stage})
    set_tests_properties(zero_train_resume_stage${stage} PROPERTIES TIMEOUT 900)
  endforeach()
  # The same for a Llama-family model (zero/llama.h) at stage 3.
  add_test(NAME zero_train_resume_llama_stage3
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/check_resume.sh $<TARGET_FILE:zero-train>
                   ${ZERO_RUN_SCRIPT} ${CMAKE_CURRENT_BINARY_DIR}/train/resume-stage3.json
                   ${CMAKE_CURRENT_BINARY_DIR}/train/run-resume-llama-stage3 llama-tiny)
  set_tests_properties(zero_train_resume_llama_stage3 PROPERTIES TIMEOUT 900)
  # A Llama-family checkpoint reshards: 2 ranks at stage 3 to 1 rank at stage 2 and 4 at stage 1.
  add_test(NAME zero_train_reshard_llama
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/check_reshard_train.sh $<TARGET_FILE:zero-train>
                   ${ZERO_RUN_SCRIPT} ${CMAKE_CURRENT_BINARY_DIR}/train/reshard-llama llama-tiny)
  set_tests_properties(zero_train_reshard_llama PROPERTIES TIMEOUT 600)
  # Adagrad's, Lion's, LAMB's and Muon's state through the same reshard, on gpt2-tiny (Muon's
  # matrices cut differently by each layout: Note [Muon under partitioning]).
  foreach(optimizer "Adagrad|{\"type\": \"Adagrad\", \"params\": {\"lr\": 0.02, \"initial_accumulator_value\": 0.1}}"
                    "Lion|{\"type\": \"Lion\", \"params\": {\"lr\": 3e-4, \"weight_decay\": 0.1}}"
                    "Lamb|{\"type\": \"Lamb\", \"params\": {\"lr\": 4e-3, \"weight_decay\": 0.01}}"
                    "Muon|{\"type\": \"Muon\", \"params\": {\"muon_lr\": 0.02, \"adam_lr\": 1e-3, \"weight_decay\": 0.01}}")
    string(FIND "${optimizer}" "|" bar)
    string(SUBSTRING "${optimizer}" 0 ${bar} name)
    math(EXPR json_start "${bar} + 1")
    string(SUBSTRING "${optimizer}" ${json_start} -1 json)
    string(TOLOWER ${name} lower)
    add_test(NAME zero_train_reshard_${lower}
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/check_reshard_train.sh
                     $<TARGET_FILE:zero-train> ${ZERO_RUN_SCRIPT}
                     ${CMAKE_CURRENT_BINARY_DIR}/train/reshard-${lower} gpt2-tiny "${json}")
    set_tests_properties(zero_train_reshard_${lower} PROPERTIES TIMEOUT 600)
  endforeach()
  add_test(NAME zero_train_readme_usage
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/check_readme_usage.sh $<TARGET_FILE:zero-train>
                   ${PROJECT_SOURCE_DIR}/README.md)
  # An export loads in Hugging Face transformers (skipped, exit 77, without it).
  if(TARGET zero-ckpt AND ZERO_PYTHON3)
    add_test(NAME zero_ckpt_export_from_pretrained
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/check_hf_export.sh $<TARGET_FILE:zero-train>
                     ${ZERO_RUN_SCRIPT} $<TARGET_FILE:zero-ckpt> ${ZERO_PYTHON3}
                     ${CMAKE_CURRENT_BINARY_DIR}/train/hf-export gpt2-tiny llama-tiny)
    set_tests_properties(zero_ckpt_export_from_pretrained PROPERTIES TIMEOUT 600)
  endif()
  # The tensorboard section's event files, read back with the tensorboard package (skipped,
  # exit 77, without it).
  if(ZERO_PYTHON3)
    add_test(NAME zero_train_tensorboard
             COMMAND ${ZERO_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/train/check_tensorboard.py
                     ${ZERO_RUN_SCRIPT} $<TARGET_FILE:zero-train>
                     ${CMAKE_CURRENT_BINARY_DIR}/train/tensorboard)
    set_tests_properties(zero_train_tensorboard PROPERTIES TIMEOUT 300)
  endif()
  # The DeepSpeed example and the resume tests train in fp16, and libtorch 1.x (Debian's
  # libtorch-dev) has no fp16 CPU kernels for LayerNorm or matmul: reported as disabled there
  # rather than failing.
  if(Torch_VERSION VERSION_LESS 2.0)
    set_tests_properties(zero_train_deepspeed_example zero_train_resume_stage2
                         zero_train_resume_stage3 zero_train_resume_llama_stage3
                         PROPERTIES DISABLED TRUE)
  endif()
endif()
