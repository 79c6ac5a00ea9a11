# The broker's log on disk (see src/log/README.md): record batches, segments
# with offset and time indexes, recovery, retention, compaction, idempotent
# producer state, the log directory and its flusher thread.
tally_library(broker_log
  SOURCES
    ${CMAKE_CURRENT_SOURCE_DIR}/src/log/compression.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/src/log/file_util.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/src/log/flush_pool.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/src/log/log_manager.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/src/log/partition_log.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/src/log/partition_log_cleaner.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/src/log/producer_state.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/src/log/record_batch.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/src/log/segment.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/src/log/topic_config.cc
  PUBLIC_DEPS tally::base
  PRIVATE_DEPS fmt::fmt Threads::Threads)

# Codecs for reading records inside compressed batches (compaction,
# ListOffsets by timestamp). Each is optional: without it, batches of that
# codec are kept whole by compaction (see src/log/compression.h). The test
# links them too, to compress what it feeds the log.
set(broker_log_codec_libs "")
set(broker_log_codec_defs "")
find_package(ZLIB QUIET)
if(ZLIB_FOUND)
  list(APPEND broker_log_codec_libs ZLIB::ZLIB)
  list(APPEND broker_log_codec_defs TALLY_HAVE_ZLIB)
endif()
pkg_check_modules(BROKER_LZ4 QUIET IMPORTED_TARGET liblz4)
if(BROKER_LZ4_FOUND)
  list(APPEND broker_log_codec_libs PkgConfig::BROKER_LZ4)
  list(APPEND broker_log_codec_defs TALLY_HAVE_LZ4)
endif()
pkg_check_modules(BROKER_ZSTD QUIET IMPORTED_TARGET libzstd)
if(BROKER_ZSTD_FOUND)
  list(APPEND broker_log_codec_libs PkgConfig::BROKER_ZSTD)
  list(APPEND broker_log_codec_defs TALLY_HAVE_ZSTD)
endif()
pkg_check_modules(BROKER_SNAPPY QUIET IMPORTED_TARGET snappy)
if(BROKER_SNAPPY_FOUND)
  list(APPEND broker_log_codec_libs PkgConfig::BROKER_SNAPPY)
  list(APPEND broker_log_codec_defs TALLY_HAVE_SNAPPY)
endif()
target_link_libraries(tally_broker_log PRIVATE ${broker_log_codec_libs})
target_compile_definitions(tally_broker_log PRIVATE ${broker_log_codec_defs})

if(TALLY_BUILD_TESTS)
  tally_test(broker_log_test
    SOURCES
      ${CMAKE_CURRENT_SOURCE_DIR}/tests/log_test_util.cc
      ${CMAKE_CURRENT_SOURCE_DIR}/tests/log_record_batch_test.cc
      ${CMAKE_CURRENT_SOURCE_DIR}/tests/log_producer_state_test.cc
      ${CMAKE_CURRENT_SOURCE_DIR}/tests/log_partition_test.cc
      ${CMAKE_CURRENT_SOURCE_DIR}/tests/log_recovery_test.cc
      ${CMAKE_CURRENT_SOURCE_DIR}/tests/log_cleaner_test.cc
      ${CMAKE_CURRENT_SOURCE_DIR}/tests/log_manager_test.cc
      ${CMAKE_CURRENT_SOURCE_DIR}/tests/log_compression_test.cc
      ${CMAKE_CURRENT_SOURCE_DIR}/tests/log_flush_pool_test.cc
    DEPS tally::broker_log tally::testing ${broker_log_codec_libs})
  target_compile_definitions(broker_log_test PRIVATE ${broker_log_codec_defs})
  target_include_directories(broker_log_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src
                                                     ${CMAKE_CURRENT_SOURCE_DIR}/tests)
endif()
