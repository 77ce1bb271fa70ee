# zero across nodes: scripts/cluster.sh makes network-namespace nodes (own hostname, /dev/shm,
# IPC; only TCP between them) and the tests train on them (tests/cluster/). Skipped (77) with
# the reason where the machine cannot make namespaces (not root, no veth or bridge).
if(TARGET zero-train)
  add_test(NAME cluster_equivalence_and_resume
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cluster/check_cluster.sh ${PROJECT_BINARY_DIR}
                   ${PROJECT_SOURCE_DIR})
  # RESOURCE_LOCK: one cluster test at a time (they share the test cluster's id).
  set_tests_properties(cluster_equivalence_and_resume PROPERTIES TIMEOUT 900
                       RESOURCE_LOCK zero_cluster)
endif()
if(TARGET zero-train AND TARGET zero-ckpt)
  add_test(NAME cluster_faults_and_elastic_resume
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cluster/check_cluster_faults.sh ${PROJECT_BINARY_DIR}
                   ${PROJECT_SOURCE_DIR})
  set_tests_properties(cluster_faults_and_elastic_resume PROPERTIES TIMEOUT 900
                       RESOURCE_LOCK zero_cluster)
endif()
