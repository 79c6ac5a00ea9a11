# group: the classic consumer-group coordinator and the durable committed
# offsets (broker/src/group/README.md).
tally_library(broker_group
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/src/group/group.cc
          ${CMAKE_CURRENT_SOURCE_DIR}/src/group/group_coordinator.cc
          ${CMAKE_CURRENT_SOURCE_DIR}/src/group/group_offsets.cc
          ${CMAKE_CURRENT_SOURCE_DIR}/src/group/offset_record.cc
          ${CMAKE_CURRENT_SOURCE_DIR}/src/group/offset_store.cc
  PUBLIC_DEPS tally::base
  PRIVATE_DEPS fmt::fmt)

if(TALLY_BUILD_TESTS)
  tally_test(broker_group_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/tests/group_coordinator_test.cc
            ${CMAKE_CURRENT_SOURCE_DIR}/tests/group_offsets_test.cc
            ${CMAKE_CURRENT_SOURCE_DIR}/tests/group_offset_store_test.cc
            ${CMAKE_CURRENT_SOURCE_DIR}/tests/group_random_test.cc
    DEPS tally::broker_group tally::testing)
  target_include_directories(broker_group_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
endif()
