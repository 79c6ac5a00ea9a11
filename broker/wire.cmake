# wire: the Kafka protocol codec (broker/src/wire/README.md). Pure code over
# base: no I/O, no threads.
tally_library(broker_wire
  SOURCES
    src/wire/admin_messages.cc
    src/wire/api_versions.cc
    src/wire/byte_reader.cc
    src/wire/byte_writer.cc
    src/wire/error_code.cc
    src/wire/group_messages.cc
    src/wire/header.cc
    src/wire/produce_fetch_messages.cc
    src/wire/request.cc
  PUBLIC_DEPS tally::base
  PRIVATE_DEPS fmt::fmt)

if(TALLY_BUILD_TESTS)
  tally_test(broker_wire_test
    SOURCES
      tests/wire_primitives_test.cc
      tests/wire_messages_test.cc
      tests/wire_request_test.cc
      tests/wire_corpus_test.cc
    DEPS tally::broker_wire tally::testing)
  target_include_directories(broker_wire_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)

  tally_fuzz_target(broker_request_decoder_fuzz
    SOURCES fuzz/request_decoder_fuzz.cc
    DEPS tally::broker_wire
    CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/request_decoder)
  target_include_directories(broker_request_decoder_fuzz PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
endif()
