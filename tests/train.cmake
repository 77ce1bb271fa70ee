# End-to-end tests of zero-train (apps/), run through zero-run on 2 ranks.
if(TARGET zero-train)
  set(ZERO_RUN_SCRIPT ${PROJECT_BINARY_DIR}/bin/zero-run)
  foreach(stage 0 1 2)
    set(STAGE ${stage})
    configure_file(${CMAKE_CURRENT_SOURCE_DIR}/train/stage.json.in
                   ${CMAKE_CURRENT_BINARY_DIR}/train/stage${stage}.json @ONLY)
    add_test(NAME zero_train_stage${stage}
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/check_train.sh $<TARGET_FILE:zero-train>
                     ${ZERO_RUN_SCRIPT} ${CMAKE_CURRENT_BINARY_DIR}/train/stage${stage}.json
                     ${CMAKE_CURRENT_BINARY_DIR}/train/run-stage${stage} 20 --expect-formula)
    set_tests_properties(zero_train_stage${stage} PROPERTIES TIMEOUT 600)
  endforeach()
  add_test(NAME zero_train_deepspeed_example
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/check_train.sh $<TARGET_FILE:zero-train>
                   ${ZERO_RUN_SCRIPT} ${CMAKE_CURRENT_SOURCE_DIR}/train/deepspeed_example.json
                   ${CMAKE_CURRENT_BINARY_DIR}/train/run-deepspeed 6 --runs-only)
  add_test(NAME zero_train_bad_inputs
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/check_bad_inputs.sh $<TARGET_FILE:zero-train>
                   ${ZERO_RUN_SCRIPT} ${CMAKE_CURRENT_BINARY_DIR}/train/bad-inputs)
  add_test(NAME zero_train_interrupt
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train/check_interrupt.sh $<TARGET_FILE:zero-train>
                   ${ZERO_RUN_SCRIPT} ${CMAKE_CURRENT_BINARY_DIR}/train/stage2.json
                   ${CMAKE_CURRENT_BINARY_DIR}/train/run-interrupt)
  set_tests_properties(zero_train_deepspeed_example zero_train_bad_inputs zero_train_interrupt
                       PROPERTIES TIMEOUT 900)
endif()
