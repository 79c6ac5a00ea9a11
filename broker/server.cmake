# server: the broker's network server and the module's public header
# broker/broker.h (src/server/README.md). Library tally_broker, alias
# tally::broker: the one target the rest of tally links.
tally_library(broker
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/src/server/broker.cc
          ${CMAKE_CURRENT_SOURCE_DIR}/src/server/handlers.cc
          ${CMAKE_CURRENT_SOURCE_DIR}/src/server/handlers_groups.cc
          ${CMAKE_CURRENT_SOURCE_DIR}/src/server/handlers_records.cc
          ${CMAKE_CURRENT_SOURCE_DIR}/src/server/handlers_topics.cc
          ${CMAKE_CURRENT_SOURCE_DIR}/src/server/producer_ids.cc
          ${CMAKE_CURRENT_SOURCE_DIR}/src/server/server.cc
  PUBLIC_DEPS tally::base
  PRIVATE_DEPS tally::broker_wire tally::broker_log tally::broker_group fmt::fmt Threads::Threads)

if(TALLY_BUILD_TESTS)
  # A broker in a process of its own, for the tests that SIGKILL it.
  add_executable(broker_test_main ${CMAKE_CURRENT_SOURCE_DIR}/tests/broker_main.cc)
  target_link_libraries(broker_test_main PRIVATE tally::broker tally::base)
  tally_compile_options(broker_test_main)

  tally_test(broker_server_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/tests/server_test_util.cc
            ${CMAKE_CURRENT_SOURCE_DIR}/tests/server_rdkafka_test.cc
            ${CMAKE_CURRENT_SOURCE_DIR}/tests/server_tools_test.cc
            ${CMAKE_CURRENT_SOURCE_DIR}/tests/server_robustness_test.cc
            ${CMAKE_CURRENT_SOURCE_DIR}/tests/server_raw_api_test.cc
            ${CMAKE_CURRENT_SOURCE_DIR}/tests/server_crash_test.cc
            ${CMAKE_CURRENT_SOURCE_DIR}/tests/server_disk_full_test.cc
    DEPS tally::broker tally::broker_wire tally::broker_log tally::testing
    LABELS integration
    TIMEOUT 120)
  target_include_directories(broker_server_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src
                                                        ${CMAKE_CURRENT_SOURCE_DIR}/tests)
  target_compile_definitions(broker_server_test PRIVATE
    TALLY_BROKER_MAIN="$<TARGET_FILE:broker_test_main>"
    TALLY_BROKER_TESTS_DIR="${CMAKE_CURRENT_SOURCE_DIR}/tests")
  add_dependencies(broker_server_test broker_test_main)
endif()
