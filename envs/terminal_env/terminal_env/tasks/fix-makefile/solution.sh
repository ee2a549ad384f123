#!/bin/bash
set -e
printf 'build/index.html: pages/header.html pages/body.html pages/footer.html\n\tmkdir -p build\n\tcat $^ > $@\n' > site/Makefile
make -C site
