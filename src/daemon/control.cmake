# Control socket, warm-up loads, dataset status and Prometheus metrics served
# by the mount daemon. Included from src/daemon/CMakeLists.txt.
target_sources(granary PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/loader.cc
  ${CMAKE_CURRENT_LIST_DIR}/status.cc
  ${CMAKE_CURRENT_LIST_DIR}/control.cc
  ${CMAKE_CURRENT_LIST_DIR}/control_request.cc
  ${CMAKE_CURRENT_LIST_DIR}/control_service.cc
  ${CMAKE_CURRENT_LIST_DIR}/metrics.cc)
if(GRANARY_BUILD_TESTS)
  granary_test(daemon_control_test
    ${CMAKE_CURRENT_LIST_DIR}/loader_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/status_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/control_test.cc)
endif()
