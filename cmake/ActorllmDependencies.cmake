# Every dependency comes from a Debian package; scripts/setup.sh installs them.
find_package(Threads REQUIRED)
find_package(simdjson REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 REQUIRED)
find_package(doctest REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)

# Debian ships no CMake config for CAF 0.17: wrap the libraries in imported targets ourselves. Only actors/ and
# net/ link these.
find_library(CAF_CORE_LIBRARY caf_core)
find_library(CAF_IO_LIBRARY caf_io)
find_library(CAF_OPENSSL_LIBRARY caf_openssl)
find_path(CAF_INCLUDE_DIR caf/all.hpp)
# OpenSSL (libssl-dev): CAF's OpenSSL module carries the control plane over TLS (actors/cluster/control_network.cpp), which
# also checks the certificate files with it.
find_package(OpenSSL REQUIRED)
if(CAF_CORE_LIBRARY AND CAF_IO_LIBRARY AND CAF_OPENSSL_LIBRARY AND CAF_INCLUDE_DIR)
  add_library(caf::core UNKNOWN IMPORTED)
  set_target_properties(caf::core PROPERTIES IMPORTED_LOCATION ${CAF_CORE_LIBRARY}
                                             INTERFACE_LINK_LIBRARIES Threads::Threads)
  add_library(caf::io UNKNOWN IMPORTED)
  set_target_properties(caf::io PROPERTIES IMPORTED_LOCATION ${CAF_IO_LIBRARY}
                                           INTERFACE_LINK_LIBRARIES caf::core)
  add_library(caf::openssl UNKNOWN IMPORTED)
  set_target_properties(caf::openssl PROPERTIES IMPORTED_LOCATION ${CAF_OPENSSL_LIBRARY}
                                                INTERFACE_LINK_LIBRARIES "caf::io;OpenSSL::SSL")
else()
  message(FATAL_ERROR "CAF 0.17 not found: run scripts/setup.sh (installs libcaf-dev)")
endif()

# Gloo (libgloo-dev): the data plane between processes, used only inside comm/*.cpp. Debian's GlooConfig.cmake
# defines an unnamespaced `gloo` for one configuration only; wrap the library like CAF instead. Its headers live in
# /usr/include, an implicit include directory, so no include path is added.
find_library(GLOO_LIBRARY gloo)
find_path(GLOO_INCLUDE_DIR gloo/rendezvous/context.h)
if(GLOO_LIBRARY AND GLOO_INCLUDE_DIR)
  add_library(gloo::gloo UNKNOWN IMPORTED)
  set_target_properties(gloo::gloo PROPERTIES IMPORTED_LOCATION ${GLOO_LIBRARY}
                                              INTERFACE_INCLUDE_DIRECTORIES ${GLOO_INCLUDE_DIR}
                                              INTERFACE_LINK_LIBRARIES Threads::Threads)
else()
  message(FATAL_ERROR "Gloo not found: run scripts/setup.sh (installs libgloo-dev)")
endif()
