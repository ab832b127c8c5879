#!/bin/bash
echo stone > /app/data.txt
