#!/bin/bash
set -e
chmod 755 tools/*.sh
